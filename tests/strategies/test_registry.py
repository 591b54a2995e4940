"""The strategy registry: names and aliases, what each backend offers, grid rules, and that every
record names a worker class and a projector that exist."""

from __future__ import annotations

import importlib.util
import pathlib
import re

import pytest

from gpu_parallel_kit.errors import GpkError
from gpu_parallel_kit.strategies import (
    REGISTERED,
    GridCell,
    canonical,
    check_backend,
    has,
    lookup,
    projectable_names,
    resolve,
    runnable_names,
    strategy_record,
)

PACKAGE = pathlib.Path(__file__).parents[2]


def test_model_is_the_pipelines_alias_and_tables_show_pipeline():
    assert strategy_record("model") is strategy_record("pipeline")
    assert canonical("model") == "pipeline"
    assert canonical("data+model") == "data+pipeline"
    assert canonical("no-such") == "no-such"  # an older log's name stays readable
    assert lookup("no-such") is None and not has("no-such", "baseline")


def test_an_unknown_or_projection_only_strategy_is_one_sentence_naming_the_known():
    for name in ("pipelines", "data+pipeline"):
        with pytest.raises(GpkError, match=re.escape(f"strategy={name!r} is not known")) as error:
            strategy_record(name)
        assert "single, data, pipeline, multiworker, tensor, fsdp" in str(error.value)


def test_a_backend_without_a_strategy_says_why_and_what_to_use():
    with pytest.raises(GpkError, match="not available on backend='tensorflow'.*backend='jax'"):
        check_backend("tensorflow", "tensor")
    assert check_backend("jax", "model").name == "pipeline"  # the kit's own stages on JAX
    with pytest.raises(GpkError, match="backend='torch' is not known"):
        check_backend("torch", "single")
    assert check_backend("jax", "data").name == "data"


def test_every_backend_a_record_lacks_has_its_sentence():
    for record in REGISTERED:
        if record.runnable:
            for backend in ("tensorflow", "jax"):
                assert record.offered_on(backend) or "use " in record.missing[backend]


def test_exactly_one_baseline_and_it_runs_everywhere():
    baselines = [r for r in REGISTERED if r.baseline]
    assert [r.name for r in baselines] == ["single"]
    assert set(baselines[0].worker_classes) == {"tensorflow", "jax"}


def test_grid_rules():
    def cell(count, kind="cpu", **plan):
        return GridCell(count, plan, lambda: kind)

    assert strategy_record("single").in_grid(cell(1)) and not strategy_record("single").in_grid(
        cell(2)
    )
    assert strategy_record("data").in_grid(cell(1)) and strategy_record("data").in_grid(cell(4))
    assert not strategy_record("tensor").in_grid(cell(1))
    assert strategy_record("tensor").in_grid(cell(4, mesh=(2, 2)))
    assert not strategy_record("tensor").in_grid(cell(2, mesh=(2, 2)))
    assert not strategy_record("multiworker").in_grid(cell(2, "cpu"))
    assert strategy_record("multiworker").in_grid(cell(2, "gpu"))


def test_every_worker_class_and_projector_named_exists():
    """Worker modules are read from the source (importing them would import TensorFlow)."""
    for record in REGISTERED:
        for backend, path in record.worker_classes.items():
            module, _, name = path.partition(":")
            spec = importlib.util.find_spec(module)
            assert spec is not None and spec.origin, f"{record.name} on {backend}: {module}"
            source = pathlib.Path(spec.origin).read_text()
            assert f"class {name}" in source, f"{record.name} on {backend}: {path}"
        if record.projector is not None:
            assert callable(resolve(record.projector))
    projectable = {"data", "pipeline", "multiworker", "tensor", "fsdp", "data+pipeline"}
    assert set(projectable_names()) == projectable


def test_runnable_names_are_in_the_registrys_order():
    assert runnable_names() == (
        "single",
        "data",
        "pipeline",
        "multiworker",
        "tensor",
        "fsdp",
        "expert",
    )
