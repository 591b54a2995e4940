"""Micro-batches chosen, not guessed: `micro_batches="auto"` against naive on two models.

The width-512 MLP of notebook 03 (8 Dense layers of 512 on 64 features, batch 256), where a
small micro-batch costs far more per sample than the whole batch on a CPU, and a conv stack
(8 Conv2D layers of 32 filters on 32×32×16 inputs, batch 64), where it hardly does. For each,
K=4 stages: naive, then gpipe and 1f1b with M="auto". Prints each run's simulated step (task
times measured alone, replayed on K devices), auto's choice and its reason, the curve's cost,
and the per-sample cost against micro-batch size.

With `--backend`, it runs instead naive and gpipe M=8 at K=4 on the conv stack, on TensorFlow
and JAX in paired rounds (`microbatch_backends.py`), and prints each backend's simulated ratio
gpipe ÷ naive and JAX's over TensorFlow's.

    .venv/bin/python benchmarks/microbatch.py            # GPK_QUICK=1 for fewer steps
    .venv/bin/python benchmarks/microbatch.py --backend tensorflow jax --rounds 5
"""

from __future__ import annotations

import argparse
import functools
import os
from collections.abc import Sequence

import numpy as np
from microbatch_backends import BACKENDS, compare_backends

import gpu_parallel_kit as gpk
from gpu_parallel_kit.pipeline.microbatch import Curve

QUICK = os.environ.get("GPK_QUICK") == "1"
STEPS = 6 if QUICK else 12
ROUNDS = 2 if QUICK else 5  # --backend's paired rounds


def mlp():
    import keras

    model = keras.Sequential(
        [keras.Input((64,))]
        + [keras.layers.Dense(512, activation="relu") for _ in range(8)]
        + [keras.layers.Dense(10)]
    )
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(True))
    return model


def conv_stack():
    import keras

    model = keras.Sequential(
        [keras.Input((32, 32, 16))]
        + [keras.layers.Conv2D(32, 3, padding="same", activation="relu") for _ in range(8)]
        + [keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)]
    )
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(True))
    return model


def experiment(builder, shape, batch, **options):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch * 4, *shape)).astype("float32")
    y = rng.integers(0, 10, batch * 4).astype("int32")
    return gpk.Experiment(
        model=builder,
        data=(x, y),
        batch_size=batch,
        steps_per_epoch=STEPS,
        progress=False,
        **options,
    )


def main(argv: Sequence[str] | None = None) -> None:
    args = _parse(argv)
    if args.backend is not None:
        conv = functools.partial(experiment, conv_stack, (32, 32, 16), 64)
        compare_backends(conv, args.backend or list(BACKENDS), args.rounds, args.json)
        return
    auto_choices()


def auto_choices() -> None:
    for name, exp in [
        ("width-512 MLP", experiment(mlp, (64,), 256)),
        ("conv stack", experiment(conv_stack, (32, 32, 16), 64)),
    ]:
        naive = exp.run(strategy="pipeline", devices=4)
        print(f"\n{name}: naive simulated step {naive.extra['simulated_step_time_s'] * 1e3:.1f} ms")
        for schedule in ("gpipe", "1f1b"):
            r = exp.run(strategy="pipeline", devices=4, schedule=schedule, micro_batches="auto")
            choice, curve = (
                r.extra["microbatch_choice"],
                Curve.from_dict(r.extra["microbatch_curve"]),
            )
            ratio = r.extra["simulated_step_time_s"] / naive.extra["simulated_step_time_s"]
            on_curve = {o["micro_batches"]: o["step_s"] for o in choice["options"]}
            print(
                f"  {schedule} auto: M={r.micro_batches}, simulated step "
                f"{r.extra['simulated_step_time_s'] * 1e3:.1f} ms = {ratio:.2f}× naive's; on the "
                f"curve {on_curve[r.micro_batches] / on_curve[1]:.2f}× M=1's; curve cost "
                f"{curve.cost_s:.2f} s"
            )
            print(f"    {choice['reason']}")
        whole = curve.per_sample(max(curve.sizes))
        print(
            "  per-sample cost vs the whole batch's: "
            + ", ".join(f"{n}: {curve.per_sample(n) / whole:.2f}×" for n in curve.sizes)
        )


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="micro_batches='auto' against naive; with --backend, gpipe against naive "
        "on TensorFlow and JAX side by side."
    )
    parser.add_argument(
        "--backend",
        nargs="*",
        choices=BACKENDS,
        help="run gpipe M=8 against naive at K=4 on the conv stack on these backends (none "
        "named: both) instead of the auto choices",
    )
    parser.add_argument(
        "--rounds", type=int, default=ROUNDS, help=f"--backend's paired rounds ({ROUNDS})"
    )
    parser.add_argument("--json", help="--backend: also write every round's figures here")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds {args.rounds} is too few; use 1 or more (5 for a verdict)")
    if args.backend is not None:
        args.backend = list(dict.fromkeys(args.backend))
    return args


if __name__ == "__main__":
    main()
