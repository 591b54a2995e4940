"""`micro_batches="auto"` reaches the plan from the API, `gpk`, `%gpk` and the panel, and a bad
value is one sentence; no run starts here."""

from __future__ import annotations

import argparse
from collections import defaultdict

import pytest

from gpu_parallel_kit.cli.parser import build_parser
from gpu_parallel_kit.errors import GpkError
from gpu_parallel_kit.notebook import magics
from gpu_parallel_kit.options.request import request_from
from gpu_parallel_kit.options.table import TRAINING, api_arguments
from tests import builders
from tests.builders import small_experiment


def _cli(command: str) -> argparse.ArgumentParser:
    # Every command's handler is a no-op: only the parser is wanted.
    parser = build_parser(defaultdict(lambda: lambda args: 0))
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return subparsers.choices[command]


@pytest.fixture
def deep_mlp_experiment(fake_machine):
    """The deep MLP, planned on the fake machine."""
    return small_experiment(builders.deep_mlp)


def test_the_api_plans_auto_under_every_schedule(deep_mlp_experiment):
    for schedule in (None, "naive", "gpipe", "1f1b", "interleaved", "zb-h1"):
        spec = deep_mlp_experiment.plan(
            strategy="pipeline", devices=2, schedule=schedule, micro_batches="auto"
        )
        assert spec.micro_batches == "auto"
        assert spec.result_identity()["micro_batches"] is None  # the worker's choice fills it
    planned = deep_mlp_experiment.plan(strategy="model", devices=2, micro_batches="auto")
    assert planned.schedule == "gpipe"


def test_a_bad_micro_batch_count_is_one_sentence(deep_mlp_experiment, fake_machine):
    with pytest.raises(GpkError, match="micro_batches='many' is not a count; .*'auto'"):
        deep_mlp_experiment.plan(strategy="pipeline", devices=2, micro_batches="many")
    odd = small_experiment(builders.deep_mlp, batch_size=30)
    with pytest.raises(GpkError, match="batch_size=30 splits into no multiple of the 4 devices"):
        odd.plan(strategy="pipeline", devices=4, schedule="interleaved", micro_batches="auto")


@pytest.mark.parametrize("command", ["run", "compare"])
def test_gpk_and_the_magic_read_auto(command):
    for parser in (_cli(command), getattr(magics, command).parser):
        args = parser.parse_args(["--micro-batches", "auto"])
        request = request_from(args, model="mlp", data=None)
        _, plan = api_arguments({o.name: getattr(request, o.name) for o in TRAINING})
        assert plan["micro_batches"] == "auto"
        with pytest.raises(Exception, match="micro_batches='x' is not a positive whole number"):
            parser.parse_args(["--micro-batches", "x"])


def test_a_comparison_plans_auto_for_its_pipelines_only(deep_mlp_experiment, fake_machine):
    deep_mlp_experiment.compare(
        strategies=["single", "data", "pipeline"], devices=[1, 2], micro_batches="auto"
    )
    planned = {(s.strategy, s.devices.count): s.micro_batches for s in fake_machine.specs}
    assert planned[("pipeline", 2)] == "auto"
    assert all(m in (None, 1) for (name, _), m in planned.items() if name != "pipeline")
