"""One command that measures the kit on a machine with NVIDIA GPUs, with JAX alone if need be.

    pip install -e ".[jax]" && pip install "jax[cuda13]>=0.10,<0.11"   # no TensorFlow needed
    python benchmarks/gpu_check.py                                     # table, and gpu_check.json

For each built-in model (mlp, cnn, transformer): `single` on one GPU, then `data` and `tensor` on
every GPU there is (left out, with a sentence, on a one-GPU machine); on JAX, and on TensorFlow
too where TensorFlow's GPU build is installed. It prints the comparison table and writes every
row, with the machine's devices and versions, to a JSON file. A few steps per run keep it under
five minutes on one GPU.

Without a GPU it says so and stops; `--allow-cpu` runs the same plan on host devices instead (a
check that the script works, not a GPU figure: every row then says cpu).

It also records the efficiency each model's one-GPU step reached: the FLOPs of its training step
as the compiler counts them (`Experiment.counted_step`, once per model), per second of the
measured step, divided by the GPU preset's peak at the precision the run used (tf32 by default:
JAX multiplies float32 matrices in TF32 on A100 and H100). The efficiency table and the JSON's
`efficiency` entries say how to hand it back to a projection (`calibrate=`), and each one-GPU
row carries `extra["gpu_preset"]` and `extra["precision"]`, so the row itself calibrates:
`cmp.project("nvlink4", calibrate=row)`.

Then it calibrates the GPUs (`gpk.calibrate(model=...)`, per backend) and prints each row's
measured step beside the step the calibration predicts (`predicted_over_measured`), so the
first GPU machine holds the cost model to its own runs; `--no-calibrate` leaves that out.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import pathlib
import platform
import sys
import time

import gpu_parallel_kit as gpk
from gpu_parallel_kit.analysis.cost_model import hardware_presets
from gpu_parallel_kit.analysis.cost_model.counted_work import from_counts
from gpu_parallel_kit.analysis.tables.comparison_table import format_table
from gpu_parallel_kit.runs.description.device_choice import discover_physical_devices
from gpu_parallel_kit.runs.results.run_result import RunResult

MODELS = {"mlp": "tabular", "cnn": "images", "transformer": "tokens"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="gpu_check.json", help="JSON file for every row")
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps per run")
    parser.add_argument("--batch-size", type=int, default=256, help="global batch")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument(
        "--allow-cpu", action="store_true", help="without GPUs, run on 2 host devices instead"
    )
    parser.add_argument(
        "--gpu",
        choices=list(hardware_presets.DEVICES),
        help="the GPU's preset for the efficiency; default: found in the GPU's name",
    )
    parser.add_argument(
        "--no-calibrate",
        action="store_true",
        help="skip calibrating the GPUs and predicting each row from the calibration",
    )
    parser.add_argument(
        "--precision",
        default="tf32",
        choices=list(hardware_presets.PRECISIONS),
        help="the precision the runs' matrices were multiplied at; default: %(default)s",
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    backends = ["jax"] + (["tensorflow"] if _has_tensorflow_gpu() else [])
    gpus = [d for d in discover_physical_devices("jax") if d.kind == "gpu"]
    if not gpus and not args.allow_cpu:
        print(
            "JAX sees no GPU here (is JAX's CUDA build installed? "
            "pip install 'jax[cuda13]>=0.10,<0.11'); "
            "nothing to measure. --allow-cpu runs the same plan on host devices.",
            file=sys.stderr,
        )
        return 1
    count = len(gpus) if gpus else 2
    strategies = ["single", "data", "tensor"] if count > 1 else ["single"]
    if count == 1:
        print("one GPU: data and tensor need two or more, so only single runs", file=sys.stderr)
    if "tensorflow" not in backends:
        print("TensorFlow's GPU build is not installed: JAX rows only", file=sys.stderr)
    preset = args.gpu or (_preset_of(gpus[0].description) if gpus else None)
    if gpus and preset is None:
        print(
            f"{gpus[0].description!r} has no preset here: no efficiency is recorded; pass --gpu "
            f"({', '.join(hardware_presets.DEVICES)}) to name the nearest",
            file=sys.stderr,
        )
    rows, efficiencies = [], []
    for name in args.models:
        experiment = gpk.Experiment(
            name, MODELS[name], batch_size=args.batch_size, steps_per_epoch=args.steps
        )
        # `single` runs on one device, the others on every device: compare adds the baseline.
        comparison = experiment.compare(strategies, [count], backend=backends)
        print(f"\n{name}\n{format_table(comparison.table)}")
        single = _one_gpu_row(comparison.results)
        if preset is not None and single is not None:
            counted = experiment.counted_step(experiment.experiment_id)
            if isinstance(counted, dict):
                found = measured_efficiency(single, counted, preset, args.precision)
                single.extra.update(gpu_preset=preset, precision=args.precision)
                efficiencies.append({"model": name, **found})
            else:
                print(f"{name}: no efficiency ({counted})", file=sys.stderr)
        results = comparison.results
        if not args.no_calibrate:
            results = [
                held
                for backend in backends
                for held in _predicted(name, backend, count, args, comparison.results)
            ]
        for result in results:
            rows.append({"model": name, **result.to_dict()})
    report = {
        "machine": {
            "python": platform.python_version(),
            "gpus": [{"name": g.description, "memory_bytes": g.memory_bytes} for g in gpus],
            "backends": backends,
        },
        "seconds": time.perf_counter() - started,
        "efficiency": efficiencies,
        "rows": rows,
    }
    if efficiencies:
        print(f"\n{efficiency_table(efficiencies)}")
    pathlib.Path(args.out).write_text(json.dumps(report, indent=1, default=str))
    print(f"\n{len(rows)} rows in {report['seconds']:.0f} s, written to {args.out}")
    return 0


def _predicted(
    name: str, backend: str, count: int, args: argparse.Namespace, results: list[RunResult]
) -> list[RunResult]:
    """`backend`'s rows with the step a calibration of these GPUs predicts for each, and the
    predicted-against-measured table printed; the rows as they were where it cannot."""
    own = [r for r in results if r.backend == backend]
    try:
        calibration = gpk.calibrate(
            devices=count, backend=backend, model=name, batch_size=args.batch_size
        )
        experiment = gpk.Experiment(
            name,
            MODELS[name],
            batch_size=args.batch_size,
            steps_per_epoch=args.steps,
            backend=backend,
        )
        held = experiment.predict(gpk.Comparison(own), calibration)
    except gpk.GpkError as error:
        print(f"{name} on {backend}: no calibrated prediction ({error})", file=sys.stderr)
        return own
    columns = ["strategy", "devices", "step_time_s", "predicted_step_time_s"]
    columns += ["predicted_over_measured", "predicted_off_in"]
    print(f"\n{name} on {backend}, {calibration.label}\n{held.table[columns].to_string()}")
    return held.results


def measured_efficiency(
    run: RunResult, counted: dict, preset: str, precision: str
) -> dict[str, object]:
    """The share of `preset`'s peak at `precision` that the one-GPU `run` reached, from its
    step's counted FLOPs (`counted`, as `Experiment.counted_step` returns it), and the
    `calibrate=` that hands the run's throughput back to a projection."""
    work = from_counts(counted)
    flops = work.flops_per_sample * run.global_batch + work.flops_per_step
    achieved = flops / float(run.step_time_s)
    peak = hardware_presets.device(preset).peak_flops(precision)
    calibrate = {
        "throughput_samples_s": round(float(run.throughput_samples_s), 1),
        "device": preset,
        "global_batch": run.global_batch,
        "precision": precision,
        "source": f"benchmarks/gpu_check.py run {run.run_id}",
    }
    return {
        "gpu": preset,
        "precision": precision,
        "backend": run.backend,
        "step_time_s": run.step_time_s,
        "global_batch": run.global_batch,
        "flops_per_step": flops,
        "achieved_flops_s": achieved,
        "peak_flops_s": peak,
        "efficiency": achieved / peak,
        "count_source": work.source,
        "calibrate": calibrate,
    }


def efficiency_table(found: list[dict]) -> str:
    """The efficiency each model reached, and how to feed it back to a projection."""
    lines = ["model        gpu   precision  step_ms  achieved_TFLOP/s  peak_TFLOP/s  efficiency"]
    for f in found:
        lines.append(
            f"{f['model']:<12} {f['gpu']:<5} {f['precision']:<10} {f['step_time_s'] * 1e3:>7.3g}"
            f"  {f['achieved_flops_s'] / 1e12:>16.3g}  {f['peak_flops_s'] / 1e12:>12.4g}"
            f"  {f['efficiency']:>10.3g}"
        )
    example = found[0]["calibrate"]
    lines += [
        "",
        "Feed a model's figure back to its projection (the same model; the JSON's 'efficiency' "
        "entries hold each one's):",
        f"  cmp.project('nvlink4', device={example['device']!r}, calibrate={example!r})",
        "or give the share itself as the band: efficiency=(low, likely, high).",
    ]
    return "\n".join(lines)


def _one_gpu_row(results: list[RunResult]) -> RunResult | None:
    """The finished one-device row the efficiency is measured on (JAX's first)."""
    return next((r for r in results if r.ok and r.devices == 1 and r.step_time_s), None)


def _preset_of(description: str) -> str | None:
    """The GPU preset named in a device's description, e.g. "NVIDIA H100 80GB HBM3" -> h100."""
    text = description.lower()
    return next((name for name in hardware_presets.DEVICES if name in text), None)


def _has_tensorflow_gpu() -> bool:
    """TensorFlow with a GPU it can see, asked through the kit's own discovery (in a worker)."""
    if importlib.util.find_spec("tensorflow") is None:
        return False
    return any(d.kind == "gpu" for d in discover_physical_devices("tensorflow"))


if __name__ == "__main__":
    raise SystemExit(main())
