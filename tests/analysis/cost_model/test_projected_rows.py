"""Projected rows from hand-built measured results: labelled, self-consistent, literal numbers."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from gpu_parallel_kit.analysis.cost_model.projected_rows import ProjectionOptions, project_results
from gpu_parallel_kit.analysis.tables.comparison_table import comparison_table
from gpu_parallel_kit.errors import GpkError
from gpu_parallel_kit.runs.results.run_result import RunResult

FREE = {"name": "free", "bandwidth_bytes_s": math.inf}
PARAMS = 4_000_000  # trainable parameter bytes of the model


def run(run_id, strategy, devices, step, experiment="e1", **fields) -> RunResult:
    fields.setdefault("global_batch", 256)
    fields.setdefault("extra", {"parameter_bytes": PARAMS})
    return RunResult(
        run_id=run_id,
        experiment_id=experiment,
        strategy=strategy,
        devices=devices,
        virtual=True,
        status="ok",
        step_time_s=step,
        throughput_samples_s=fields["global_batch"] / step,
        wall_time_s=20 * step,
        **fields,
    )


def timed_alone(forward: list[float], backward: list[float], micro_batches: int) -> list[dict]:
    """A simulated timeline whose tasks take the given seconds per stage (start times unused)."""
    return [
        {"stage": s, "device": s, "micro_batch": m, "kind": kind, "start": 0.0, "end": seconds}
        for kind, times in (("forward", forward), ("backward", backward))
        for s, seconds in enumerate(times)
        for m in range(micro_batches)
    ]


def model_run(**fields) -> RunResult:
    """A 2-stage gpipe run, M = 4: stage 1 does twice the work and holds 3/4 of the parameters;
    each sample sends 2048 bytes of activations down the cut and 2048 of gradients back."""
    extra = {
        "parameter_bytes": PARAMS,
        "cut_bytes": [256 * 2048 * 2],
        "stages": [
            {"stage": 0, "parameter_bytes": 1_000_000, "busy_s": 0.1},
            {"stage": 1, "parameter_bytes": 3_000_000, "busy_s": 0.2},
        ],
        "simulated_timeline": timed_alone([0.01, 0.02], [0.025, 0.05], 4),
    }
    return run("m2", "model", 2, 0.25, schedule="gpipe", micro_batches=4, extra=extra, **fields)


@pytest.fixture
def measured():
    return [
        run("s", "single", 1, 0.3),
        run("d2", "data", 2, 0.2),
        run("d4", "data", 4, 0.16),
        model_run(),
    ]


def by_id(rows):
    return {r.run_id.split(":")[-1]: r for r in rows}


def test_projected_rows_are_labelled_and_get_their_own_experiment(measured):
    rows = project_results(measured, "nvlink4", [1, 2, 4, 8])
    assert all(r.projected and r.ok and not r.virtual for r in rows)
    assert {r.experiment_id for r in rows} == {"e1:nvlink4"}
    assert list(by_id(rows)) == [
        "single-1",
        "data-1",
        "data-2",
        "data-4",
        "data-8",
        "pipeline-gpipe-m4-1",
        "pipeline-gpipe-m4-2",
        "pipeline-gpipe-m4-4",
        "pipeline-gpipe-m4-8",
    ]
    first = rows[0]
    assert first.reason == "projected on nvlink4, compute as measured on cpu"
    assert first.extra["preset"] == "nvlink4"
    assert first.extra["compute_scale"] == 1.0
    assert first.wall_time_s is None and first.step_times_s == ()
    notes = " | ".join(first.extra["assumptions"])
    assert "compute from single run s: 0.3 s per step of 256 samples" in notes
    assert "only communication is projected" in notes
    assert "backward = 2.5 × forward (tasks of m2 timed alone)" in notes
    assert "link nvlink4: 400 GB/s, 3 µs" in notes
    assert all(not r.projected for r in measured)  # the measured rows are left alone


def test_data_parallel_row_literal(measured):
    row = by_id(project_results(measured, "pcie4", [4]))["data-4"]
    # backward 2.5 x forward measured; compute 0.3 / 4 = 0.075 s; ring all-reduce of 4 MB:
    # 5 µs x 6 + 1.5 x 4e6 / 25e9 = 2.7e-4 s.
    assert row.step_time_s == pytest.approx(0.075 + 2.7e-4)
    assert row.comm_time_s == pytest.approx(2.7e-4)
    assert row.comm_share == pytest.approx(2.7e-4 / 0.07527)
    assert row.comm_bytes == 2 * 3 * PARAMS
    assert row.throughput_samples_s == pytest.approx(256 / 0.07527)
    assert row.all_reduce == "ring"
    overlapped = ProjectionOptions(overlap=True)
    hidden = by_id(project_results(measured, "pcie4", [4], overlapped))["data-4"]
    assert hidden.step_time_s == pytest.approx(0.075)  # the backward hides the all-reduce


def test_speedup_is_against_the_projected_single_device(measured):
    rows = project_results(measured, FREE, [2, 4, 8], ProjectionOptions(strategies=["data"]))
    table = comparison_table(measured + rows)
    projected = table[table["projected"]].set_index("run_id")
    assert projected.loc["e1:free:single-1", "speedup"] == pytest.approx(1.0)
    assert projected.loc["e1:free:data-8", "speedup"] == pytest.approx(8.0)  # free links
    measured_part = table[~table["projected"]].set_index("run_id")
    assert measured_part.loc["d2", "speedup"] == pytest.approx(1.5)  # untouched by projection


def test_model_rows_use_the_measured_stage_split_and_cut_bytes(measured):
    rows = by_id(project_results(measured, FREE, [2], ProjectionOptions(strategies=["model"])))
    two = rows["pipeline-gpipe-m4-2"]
    # Per micro-batch of 64 samples: forward 0.3/4/3.5 s and backward 2.5 times that, split
    # 1 : 2 between the stages as timed alone. Stage 1 is the bottleneck: its 4 forwards
    # after stage 0's first, its 4 backwards, then stage 0's last backward.
    forward = 0.3 / 4 / 3.5
    f0, f1, b0, b1 = forward / 3, 2 * forward / 3, 2.5 * forward / 3, 5 * forward / 3
    assert two.step_time_s == pytest.approx(f0 + 4 * f1 + 4 * b1 + b0)
    assert two.extra["bubble_fraction"] == pytest.approx(1 - 0.3 / (2 * two.step_time_s))
    assert two.comm_bytes == 256 * 2048 * 2
    assert two.schedule == "gpipe" and two.micro_batches == 4
    assert (
        "2 stages as in m2: work shares from its tasks timed alone"
        in (two.extra["assumptions"][-1])
    )
    assert "bytes per sample per cut: 2048" in two.extra["assumptions"][-1]


def test_unmeasured_stage_counts_get_equal_stages_and_the_measured_cut_bytes(measured):
    rows = by_id(
        project_results(
            measured, {"bandwidth_gb_s": 1}, [4], ProjectionOptions(strategies=["model"])
        )
    )
    note = rows["pipeline-gpipe-m4-4"].extra["assumptions"][-1]
    assert note == (
        "4 equal stages (assumed); 2048 activation bytes per sample across each cut (measured mean)"
    )
    assert rows["pipeline-gpipe-m4-4"].comm_bytes == 3 * 256 * 2048 * 2


def test_compute_scale_given_or_from_device_presets(measured):
    ten_times = ProjectionOptions(compute_scale=10)
    fast = by_id(project_results(measured, "nvlink4", [1], ten_times))["single-1"]
    assert fast.experiment_id == "e1:nvlink4x10"
    assert fast.step_time_s == pytest.approx(0.03)
    assert fast.reason == "projected on nvlink4x10, compute ×10"
    rows = project_results(
        measured, "nvlink4", [1], ProjectionOptions(device="h100", measured_device="a100")
    )
    h100 = by_id(rows)["single-1"]
    assert h100.experiment_id == "e1:nvlink4+h100"
    assert h100.device_kind == "gpu"
    assert h100.step_time_s == pytest.approx(0.3 * 312 / 989)
    assert any("rough guess" in note for note in h100.extra["assumptions"])  # measured on cpu


def test_a_target_device_without_the_measured_one_is_refused(measured):
    with pytest.raises(GpkError, match="measured_device="):
        project_results(measured, "nvlink4", [2], ProjectionOptions(device="h100"))


def test_weak_scaling_grows_the_global_batch():
    weak = [
        run("s", "single", 1, 0.3, scaling="weak"),
        run("d2", "data", 2, 0.3, global_batch=512, scaling="weak"),
    ]
    rows = by_id(project_results(weak, FREE, [1, 4]))
    assert rows["data-4"].global_batch == 1024
    assert rows["data-4"].scaling == "weak"
    assert rows["data-4"].step_time_s == pytest.approx(0.3)  # each device keeps its 256 samples


def test_data_times_pipeline_rows_only_where_the_stages_divide(measured):
    rows = by_id(
        project_results(measured, "nvlink4", [2, 4, 6, 8], ProjectionOptions(hybrid_stages=2))
    )
    hybrid = [key for key in rows if key.startswith("data+pipeline")]
    assert hybrid == [
        "data+pipeline-2x2-gpipe-m4",
        "data+pipeline-3x2-gpipe-m4",
        "data+pipeline-4x2-gpipe-m4",
    ]
    assert rows["data+pipeline-4x2-gpipe-m4"].devices == 8
    assert rows["data+pipeline-4x2-gpipe-m4"].strategy == "data+pipeline"


def test_projected_rows_in_the_input_are_ignored(measured):
    first = project_results(measured, "pcie4", [2])
    again = project_results(measured + first, "pcie4", [2])
    assert [r.run_id for r in again] == [r.run_id for r in first]


def test_experiments_without_a_baseline_are_skipped_and_none_at_all_is_an_error(measured):
    orphan = run("o", "data", 2, 0.2, experiment="e2")
    rows = project_results([*measured, orphan], "pcie4", [2])
    assert {r.experiment_id for r in rows} == {"e1:pcie4"}
    with pytest.raises(GpkError, match="run strategy='single'"):
        project_results([orphan], "pcie4", [2])


def test_bad_requests_say_how_to_fix_them(measured):
    with pytest.raises(GpkError, match="cannot be projected"):
        project_results(measured, "pcie4", [2], ProjectionOptions(strategies=["zero"]))
    with pytest.raises(GpkError, match="hybrid_stages=K"):
        project_results(measured, "pcie4", [2], ProjectionOptions(strategies=["data+model"]))
    with pytest.raises(GpkError, match="devices=0"):
        project_results(measured, "pcie4", [0])
    with pytest.raises(GpkError, match="cut_bytes_per_sample="):
        project_results(
            [run("s", "single", 1, 0.3)], "pcie4", [4], ProjectionOptions(strategies=["model"])
        )


def test_projected_rows_survive_json(measured):
    for row in project_results(measured, "net100g", [2, 4], ProjectionOptions(hybrid_stages=2)):
        assert RunResult.from_json(row.to_json()) == row


def test_no_tensorflow_or_keras_in_the_cost_model_modules():
    code = (
        "import sys\n"
        "import gpu_parallel_kit.analysis.cost_model.step_time_model\n"
        "import gpu_parallel_kit.analysis.cost_model.hardware_presets\n"
        "import gpu_parallel_kit.analysis.cost_model.projected_rows\n"
        "import gpu_parallel_kit.plots.comparison\n"
        "print(sorted(m for m in ('tensorflow', 'keras') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
