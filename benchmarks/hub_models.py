"""keras-hub backbones built tiny from a config, under every strategy of both backends: the
median step, the cuts a pipeline chose, and how far each run's trained weights are from the
same model trained on one device of the same backend.

    python benchmarks/hub_models.py                      # every backbone tests/hub_models.py builds
    python benchmarks/hub_models.py --model llama --steps 4

Needs keras-hub (`pip install -e ".[hub]"`, docs/getting-started.md). The backbones and their
data are the tests' own (`tests/hub_models.py`): 2 blocks, width 32, sequences of 16 tokens,
global batch 32.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import gpu_parallel_kit as gpk  # noqa: E402
from tests import hub_models  # noqa: E402
from tests.builders import largest_difference, saved_weights  # noqa: E402

PLANS = {
    "tensorflow": [
        ("single", 1, {}),
        ("data", 2, {}),
        ("multiworker", 1, {"workers": 2}),
        ("pipeline", 2, {}),
        ("pipeline", 4, {}),
    ],
    "jax": [
        ("single", 1, {}),
        ("data", 2, {}),
        ("tensor", 2, {}),
        ("tensor", 2, {"layout_map": "own"}),
    ],
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", nargs="+", default=list(hub_models.INPUTS))
    parser.add_argument("--steps", type=int, default=6, help="training steps per run")
    args = parser.parse_args()
    _row("model", "backend", "run", "median step (ms)", "largest weight difference", "cuts")
    _row(*["---"] * 6)
    with tempfile.TemporaryDirectory(prefix="gpk_hub_") as folder:
        for name in args.model:
            for backend, plans in PLANS.items():
                exp = gpk.Experiment(
                    model=getattr(hub_models, name),
                    data=hub_models.tokens(name),
                    batch_size=32,
                    steps_per_epoch=args.steps,
                    backend=backend,
                    progress=False,
                    log=f"{folder}/runs.sqlite",
                )
                reference = None
                for strategy, devices, extra in plans:
                    path = f"{folder}/{name}_{backend}_{strategy}_{devices}.npz"
                    result = exp.run(strategy, devices, save_weights=path, **extra)
                    label = f"{strategy}×{devices}" + "".join(f" {k}={v}" for k, v in extra.items())
                    if not result.ok:
                        _row(name, backend, label, f"{result.status}: {result.reason}", "", "")
                        continue
                    weights = saved_weights(path)
                    if strategy == "single":
                        reference, shown = weights, ""
                    elif reference is None:
                        shown = "no single run to compare with"
                    else:
                        shown = f"{largest_difference(weights, reference):.1e}"
                    cuts = list(result.stages["first_layer"])[1:] if strategy == "pipeline" else []
                    step = f"{result.step_time_s * 1000:.1f}"
                    _row(name, backend, label, step, shown, ", ".join(cuts))
    return 0


def _row(*cells: str) -> None:
    print("| " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
