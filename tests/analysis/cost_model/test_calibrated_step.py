"""Each strategy's predicted step composed from a literal calibration, part by part."""

from __future__ import annotations

import pytest

from gpu_parallel_kit.analysis.cost_model.calibrated_step import far_off_part, predict
from gpu_parallel_kit.analysis.cost_model.counted_work import LayerWork, WorkCount
from gpu_parallel_kit.analysis.cost_model.device_calibration import ModelStep
from gpu_parallel_kit.analysis.tables.comparison_table import comparison_table
from gpu_parallel_kit.errors import GpkError
from gpu_parallel_kit.runs.results.run_result import RunResult

from .test_device_calibration import busy, calibration

PARAMS = 400_000


def cal4(shared: bool = True, dispatch_s: float = 0.0):
    """Steps of 1, 2 and 4 ms at 64, 128 and 256 samples on one device; with `shared` cores,
    g busy devices each take g times as long (they do one device's worth of work together),
    else each as long as one alone; a call of the step dispatches in `dispatch_s` (0: not
    timed, a trivial call's)."""
    steps = tuple(
        ModelStep(
            "k",
            "mlp",
            g,
            (64, 128, 256),
            tuple(t * (g if shared else 1) for t in (0.001, 0.002, 0.004)),
            dispatch_s,
        )
        for g in (1, 2, 4)
    )
    return calibration(
        device_names=tuple(f"/cpu:{i}" for i in range(4)),
        busy=(busy(1), busy(2), busy(4)),
        model_steps=steps,
    )


def run(strategy, devices, step=0.004, **extra) -> RunResult:
    return RunResult(
        run_id=f"{strategy}-{devices}",
        experiment_id="e",
        strategy=strategy,
        devices=devices,
        virtual=devices > 1,
        status="ok",
        global_batch=256,
        step_time_s=step,
        throughput_samples_s=256 / step,
        backend="jax",
        device_kind="cpu",
        extra={"parameter_bytes": PARAMS, "tuned": {"steps_per_execution": 8}, **extra},
    )


def test_single_is_the_timed_step_and_a_share_of_a_call():
    cal = cal4()
    p = predict(run("single", 1), cal, "k", None)
    assert p.compute_s == pytest.approx(0.004)  # the timed step: loss, optimizer, metrics
    assert p.fixed_s == pytest.approx(cal.call_s(1) / 8)
    assert p.step_s == pytest.approx(p.compute_s + p.fixed_s)
    assert p.communication_s == 0 and p.compute_source == "the model's step, timed"


def test_data_adds_the_gradient_all_reduce_over_its_devices():
    cal = cal4()
    p = predict(run("data", 4, gradient_bytes=PARAMS), cal, "k", None)
    assert p.compute_s == pytest.approx(0.004)  # 64 samples, 4 busy
    assert p.communication_s == pytest.approx(cal.collective_s("all_reduce", PARAMS, 4))
    assert p.fixed_s == pytest.approx(cal.call_s(4) / 8)


def test_tensor_adds_each_activation_all_reduce_on_the_model_axis():
    cal = cal4()
    collectives = [{"elements_per_sample": 64}, {"elements_per_sample": 32}]
    p = predict(run("tensor", 2, collectives=collectives), cal, "k", None)
    expected = sum(cal.collective_s("all_reduce", e * 256 * 4, 2) for e in (64, 32))
    assert p.communication_s == pytest.approx(expected)


def test_a_call_of_the_step_costs_the_dispatch_timed_with_the_models_arrays():
    cal = cal4(dispatch_s=0.0008)
    p = predict(run("data", 4, gradient_bytes=PARAMS), cal, "k", None)
    assert p.fixed_s == pytest.approx(0.0008 / 8)  # one call per 8 steps
    assert cal.model_call_s("k", 4) == 0.0008 and cal.model_call_s("other", 4) == cal.call_s(4)


def test_splitting_the_batch_adds_its_timed_share_to_data_rows_and_not_to_tensor_rows():
    plain = cal4()
    base = [
        ModelStep(
            s.key,
            s.model,
            s.devices,
            s.batches,
            s.seconds,
            reduce_s=plain.collective_s("all_reduce", PARAMS, 4) + 0.002 if s.devices == 4 else 0,
            reduce_bytes=PARAMS if s.devices == 4 else 0,
            reduce_batch=64 if s.devices == 4 else 0,
        )
        for s in plain.model_steps
    ]
    cal = plain.with_model_steps(base)
    assert cal.arrival_share("k", 4) == pytest.approx(0.5)  # 2 ms more on a 4 ms step
    before = predict(run("data", 4, gradient_bytes=PARAMS), plain, "k", None)
    after = predict(run("data", 4, gradient_bytes=PARAMS), cal, "k", None)
    assert after.communication_s - before.communication_s == pytest.approx(0.5 * 0.004)
    tensor = run("tensor", 4, collectives=[{"elements_per_sample": 64}])
    assert predict(tensor, cal, "k", None) == predict(tensor, plain, "k", None)


def split_work(split_flops: float, whole_flops: float) -> WorkCount:
    """A step whose layer "a" does `split_flops` of forward products per sample and "b" the
    rest of `whole_flops`; nothing else counted."""
    return WorkCount(
        "literal",
        3 * whole_flops,
        0.0,
        0.0,
        0.0,
        layers=(
            LayerWork("a", "Dense", split_flops, 0.0, 10),
            LayerWork("b", "Dense", whole_flops - split_flops, 0.0, 10),
        ),
    )


def layout(*layers):
    return [{"layer": name, "axes": [axes, "model"]} for name, axes in layers]


def test_tensor_runs_the_whole_batch_with_a_tth_of_its_split_products():
    cal = cal4()
    whole = cal.model_step_s("k", 256, 2)  # mesh (1, 2): each device takes all 256 samples
    flops = 2 * 128**3 / 256  # one 128³ product per sample: every product at the same rate
    nothing = predict(run("tensor", 2, layout=layout()), cal, "k", split_work(flops, 2 * flops))
    assert nothing.compute_s == pytest.approx(whole)
    half = predict(
        run("tensor", 2, layout=layout(("a", ""))), cal, "k", split_work(flops, 2 * flops)
    )
    assert half.compute_s == pytest.approx(whole * (1 - 0.5 / 2))  # half the step split in 2
    every = predict(
        run("tensor", 2, layout=layout(("a", ""), ("b", ""))),
        cal,
        "k",
        split_work(flops, 2 * flops),
    )
    assert every.compute_s == pytest.approx(whole / 2)


def pipeline_run():
    stages = [
        {"stage": 0, "layers": ["a"], "parameter_bytes": PARAMS / 2},
        {"stage": 1, "layers": ["b"], "parameter_bytes": PARAMS / 2},
    ]
    r = run("pipeline", 2, stages=stages, cut_bytes=[2 * 256 * 128])
    return RunResult(**{**r.__dict__, "schedule": "gpipe", "micro_batches": 4})


def test_a_pipeline_on_independent_devices_replays_its_schedule_with_a_bubble():
    p = predict(pipeline_run(), cal4(shared=False), "k", None)
    assert p.bubble_s > 0  # two stages, four micro-batches: (K-1)/(M+K-1) of the step idle
    assert p.step_s == pytest.approx(p.compute_s + p.communication_s + p.bubble_s + p.fixed_s)


def test_a_pipeline_on_shared_cores_takes_at_least_its_total_work():
    shared = predict(pipeline_run(), cal4(shared=True), "k", None)
    alone = predict(pipeline_run(), cal4(shared=False), "k", None)
    # 1 ms per 64 samples on one device: 256 samples are 4 ms of work, which two devices
    # sharing its cores do no faster than one.
    assert shared.compute_s == pytest.approx(0.004, rel=1e-6)
    assert shared.bubble_s == 0 and shared.step_s > alone.step_s


def test_a_pipeline_whose_host_dispatches_slower_than_its_devices_work_takes_every_call():
    slow = 0.002  # a call of the step; a task's where the calibration timed none
    cal = cal4(shared=False, dispatch_s=slow)
    p = predict(pipeline_run(), cal, "k", None)
    assert cal.task_call_s("k", 2) == slow
    # Two stages of 4 forwards, 4 backwards and an update each, one dispatch at a time.
    assert p.fixed_s >= (2 * 4 + 1) * 2 * slow
    assert p.step_s > predict(pipeline_run(), cal4(shared=False), "k", None).step_s


def test_a_schedule_that_splits_the_backward_dispatches_three_tasks_a_micro_batch():
    slow = 0.002
    cal = cal4(shared=False, dispatch_s=slow)
    one_f_one_b = predict(pipeline_run(), cal, "k", None)
    zero_bubble = RunResult(**{**pipeline_run().__dict__, "schedule": "zb-h1"})
    split = predict(zero_bubble, cal, "k", None)
    # Two stages of 4 forwards, 4 input and 4 weight backwards, and an update each.
    assert split.fixed_s >= (3 * 4 + 1) * 2 * slow > one_f_one_b.fixed_s


def test_the_pipeline_runners_own_task_cost_is_dispatched_like_the_models():
    runner = 0.002  # the runner's task around no work, dearer than a call of the model's step
    cal = cal4(shared=False).with_pipeline_tasks({2: runner})
    p = predict(pipeline_run(), cal, "k", None)
    assert p.fixed_s >= (2 * 4 + 1) * 2 * runner
    assert p.step_s > predict(pipeline_run(), cal4(shared=False), "k", None).step_s


def test_a_strategy_without_a_predictor_and_another_backend_are_sentences():
    cal = cal4()
    with pytest.raises(GpkError, match="this run is on tensorflow"):
        predict(RunResult(**{**run("single", 1).__dict__, "backend": "tensorflow"}), cal, "k", None)
    with pytest.raises(GpkError, match="neither a timed model step nor a counted step"):
        predict(run("single", 1), cal, "other-model", None)
    over_workers = RunResult(**{**run("data", 2).__dict__, "workers": 2})
    with pytest.raises(GpkError, match="spans 2 worker processes"):
        predict(over_workers, cal, "k", None)


def test_far_off_names_the_part_furthest_from_its_measurement():
    cal = cal4()
    measured = run("data", 4, step=0.02, gradient_bytes=PARAMS)
    measured = RunResult(**{**measured.__dict__, "comm_time_s": 0.015})
    p = predict(measured, cal, "k", None)
    assert far_off_part(p, measured).startswith("communication under by")
    close = RunResult(**{**measured.__dict__, "step_time_s": p.step_s})
    assert far_off_part(p, close) == ""


def test_the_table_carries_the_prediction_and_its_ratio():
    cal = cal4()
    r = run("single", 1, step=0.005)
    p = predict(r, cal, "k", None)
    r = RunResult(**{**r.__dict__, "extra": {**r.extra, "predicted": p.to_extra()}})
    row = comparison_table([r]).iloc[0]
    assert row["predicted_step_time_s"] == pytest.approx(p.step_s)
    assert row["predicted_over_measured"] == pytest.approx(p.step_s / 0.005)
    assert "calibrated on 4 cpu (jax)" in row["predicted_from"]
