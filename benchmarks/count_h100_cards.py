"""Count the plan search's cards of the published H100 runs' models, each by depth.

    python benchmarks/count_h100_cards.py [--only KEY ...] [--store]

Each model of `gpu_parallel_kit/planning/published_h100_cards.py` (Llama 3 8B and 70B, Llama 3.1
405B with 8 and with 16 KV groups, Llama 2 70B, Qwen3-30B-A3B, Qwen3-235B-A22B, gpt-oss-120b,
Nemotron-4 340B as a Llama block of as many MLP weights)
is built as keras-hub builds it at its released shape, with its language-model head, and one
sample at its runs' sequence is counted at 1 and 2 blocks at full width and extrapolated to its
depth under `mixed_bfloat16` (`worker/jax/hub_cards.py`), no weight allocated, and made the
search's card (`model_card`). One model at a time, each in a fresh process with Keras on JAX
and TensorFlow kept out. Prints each card's parameters (and active parameters) against the
published counts; `--store` merges the cards
into `gpu_parallel_kit/planning/published_h100_cards.json`, keyed by the runs' `model_key`,
with how each was counted, its config, its sources and the seconds its count took. A model no
keras-hub backbone builds would be in `UNCOUNTED`, with why; none is now.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from gpu_parallel_kit.planning.published_h100_cards import (
    BY_KEY,
    H100_CARDS,
    HUB_MODELS,
    TOLERANCE,
    UNCOUNTED,
)

ROOT = Path(__file__).resolve().parents[1]
# Run first in each counting child: importing TensorFlow fails there, as where it is not
# installed (keras-hub would import it otherwise).
WITHOUT_TENSORFLOW = """
import sys

class _NoTensorFlow:
    def find_spec(self, name, path=None, target=None):
        if name == "tensorflow" or name.startswith("tensorflow."):
            raise ModuleNotFoundError(name, name=name)

sys.meta_path.insert(0, _NoTensorFlow())
"""
CHILD = """
import json
from dataclasses import asdict

from gpu_parallel_kit.analysis.cost_model.model_card import model_card
from gpu_parallel_kit.analysis.cost_model.training_precision import training_precision
from gpu_parallel_kit.planning.published_h100_cards import BY_KEY
from gpu_parallel_kit.worker.jax.hub_cards import hub_count

model = BY_KEY[{key!r}]
record = training_precision("bf16")
count = hub_count(model.backbone, model.config, model.sequence, record.policy)
card = model_card(count, record.name, "adam", model.name, sequence=model.sequence)
how = {{**count["timing"], "depths": list(count["depths"]), "policy": record.policy}}
print("JSON" + json.dumps({{"card": asdict(card), "how": how}}))
"""
TIMEOUT_S = 3600.0


def count(key: str) -> dict:
    """One model's card and how it was counted, from a fresh child."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KERAS_BACKEND": "jax"}
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_TENSORFLOW + CHILD.format(key=key)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env=env,
        cwd=ROOT,
    )
    if done.returncode != 0:
        raise SystemExit(f"counting {key} failed:\n{done.stderr[-4000:]}")
    line = next(x for x in done.stdout.splitlines() if x.startswith("JSON"))
    return json.loads(line[4:])


def report(key: str, card: dict, how: dict) -> str:
    """One line: the card's parameters (and active) against the published counts."""
    model = BY_KEY[key]
    total = card["parameters"] / model.total
    said = (
        f"{model.name} at {model.sequence:,} tokens: {card['parameters'] / 1e9:.2f} B "
        f"parameters against {model.total / 1e9:.2f} B published ({total:.3f})"
    )
    if model.active is not None:
        active = model.counted_active(card)
        said += (
            f", {active / 1e9:.2f} B active against {model.active / 1e9:.2f} B "
            f"({active / model.active:.3f})"
        )
    flops = card["flops_per_sample"] / model.sequence / 1e9
    return f"{said}; {flops:.1f} GFLOPs a token; counted in {how['seconds']:.0f} s"


def store(found: dict[str, dict]) -> None:
    """Merge the counted cards into the kept file, the others kept as they were."""
    kept = json.loads(H100_CARDS.read_text()) if H100_CARDS.exists() else {}
    cards, counted = kept.get("cards", {}), kept.get("counted", {})
    for key, answer in found.items():
        model = BY_KEY[key]
        cards[key] = answer["card"]
        counted[key] = {
            "name": model.name,
            "how": (
                f"keras-hub {answer['version']} {model.backbone} with its language-model head, "
                f"one sample of {model.sequence:,} tokens counted at "
                f"{' and '.join(map(str, answer['how']['depths']))} blocks at full width and "
                f"extrapolated to {model.config['num_layers']} under {answer['how']['policy']}, "
                "the optimizer's update left out"
            ),
            "backbone": model.backbone,
            "config": model.config,
            "sequence": model.sequence,
            "config_source": model.config_source,
            "published": {"total": model.total, "active": model.active},
            "published_source": model.published_source,
            "note": model.note,
            "seconds": answer["how"]["seconds"],
            "count_s": answer["how"]["count_s"],
        }
    order = [m.key for m in HUB_MODELS]
    out = {
        "description": (
            "The plan search's cards of the published H100 runs' models (published_h100_runs."
            "json, by model_key), counted by benchmarks/count_h100_cards.py"
        ),
        "cards": {k: cards[k] for k in order if k in cards},
        "counted": {k: counted[k] for k in order if k in counted},
        "uncounted": UNCOUNTED,
    }
    H100_CARDS.write_text(json.dumps(out, indent=1) + "\n")
    print(f"kept {len(out['cards'])} cards in {H100_CARDS.name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=list(BY_KEY), help="count these alone")
    parser.add_argument("--store", action="store_true", help="keep the cards for the tests")
    options = parser.parse_args()
    from importlib.metadata import version

    found = {}
    for key in options.only or list(BY_KEY):
        answer = count(key)
        answer["version"] = version("keras-hub")
        found[key] = answer
        print(report(key, answer["card"], answer["how"]), flush=True)
        if abs(answer["card"]["parameters"] / BY_KEY[key].total - 1) > TOLERANCE:
            print(f"  {key}: parameters beyond {TOLERANCE:.0%} of the published count")
    for key, why in UNCOUNTED.items():
        print(f"{key}: not counted: {why}")
    if options.store:
        store(found)


if __name__ == "__main__":
    main()
