"""One option table for `gpk` and `%gpk`: both expose the same options, with the same types,
choices and defaults, and both map them onto the API the same way."""

from __future__ import annotations

import argparse
import dataclasses
import inspect

import pytest

from gpu_parallel_kit.api import Experiment
from gpu_parallel_kit.cli.parser import build_parser
from gpu_parallel_kit.notebook import magics
from gpu_parallel_kit.options.request import Request, request_from
from gpu_parallel_kit.options.table import MIB, TRAINING, api_arguments

# What only one front end takes: files and module:function on the command line, notebook names
# in the magic.
CLI_ONLY = {"--model", "--data", "--validation-split", "--validation-data"}
MAGIC_ONLY = {"model", "--data", "--validation"}


def _cli(command: str) -> argparse.ArgumentParser:
    parser = build_parser(
        dict.fromkeys(
            ["", "devices", "run", "compare", "demo", "history", "worker", "plan", "search"]
            + ["calibrate"],
            lambda args: 0,
        )
    )
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return subparsers.choices[command]


def _options(parser: argparse.ArgumentParser, own: set[str]) -> dict[str, dict]:
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or "--help" in action.option_strings:
            continue
        flag = action.option_strings[-1] if action.option_strings else action.dest
        if flag in own:
            continue
        convert = action.type
        found[flag] = {
            "dest": action.dest,
            "default": action.default,
            "choices": action.choices,
            "nargs": action.nargs,
            "type": getattr(convert, "func", convert),
            "named": getattr(convert, "keywords", {}).get("name"),
            "switch": type(action).__name__,
        }
    return found


@pytest.mark.parametrize("command", ["run", "compare", "history"])
def test_both_front_ends_expose_the_same_options_with_the_same_defaults(command):
    cli = _options(_cli(command), CLI_ONLY)
    magic = _options(getattr(magics, command).parser, MAGIC_ONLY)
    assert sorted(cli) == sorted(magic)
    for flag in cli:
        assert cli[flag] == magic[flag], flag


def test_the_defaults_are_the_apis_own():
    parser = _cli("compare")
    defaults = {a.dest: a.default for a in parser._actions}
    experiment = inspect.signature(Experiment.__init__).parameters
    plan = inspect.signature(Experiment.plan).parameters
    assert defaults["batch_size"] == experiment["batch_size"].default
    assert defaults["timeout"] == experiment["timeout"].default
    assert defaults["all_reduce"] == plan["all_reduce"].default
    assert defaults["devices"] == list(
        inspect.signature(Experiment.compare).parameters["devices"].default
    )


def test_every_training_option_maps_onto_an_api_argument_and_a_request_field():
    experiment = inspect.signature(Experiment.__init__).parameters
    plan = inspect.signature(Experiment.plan).parameters
    fields = {f.name: f.default for f in dataclasses.fields(Request)}
    for option in TRAINING:
        assert option.name in (experiment if option.goes_to == "experiment" else plan)
        assert fields[option.name] == option.api_default, option.name


def test_the_command_line_and_the_magic_build_the_same_request():
    line = [
        "--batch-size",
        "64",
        "--memory-budget",
        "3",
        "--timeout",
        "none",
        "--micro-batches",
        "2",
        "--target",
        "val_accuracy=0.9",
        "--deterministic",
        "--mesh",
        "2x1",
        "--min-shard-bytes",
        "0",
    ]
    cli_args = _cli("run").parse_args(line)
    magic_args = magics.run.parser.parse_args(line)
    cli = request_from(cli_args, model="mlp", data=None)
    magic = request_from(magic_args, model="mlp", data=None)
    assert cli == magic
    settings, plan = api_arguments({o.name: getattr(cli, o.name) for o in TRAINING})
    assert settings["batch_size"] == 64 and settings["timeout"] is None
    assert settings["deterministic"] is True and settings["target"] == "val_accuracy=0.9"
    assert plan["memory_budget"] == 3 * MIB and plan["micro_batches"] == 2
    assert plan["mesh"] == (2, 1) and plan["min_shard_bytes"] == 0  # fsdp's, on both


@pytest.mark.parametrize("command", ["run", "compare"])
def test_a_bad_value_names_its_option_in_both_front_ends(command):
    for parser in (_cli(command), getattr(magics, command).parser):
        with pytest.raises(Exception, match="epochs=0 is not a positive whole number"):
            parser.parse_args(["--epochs", "0"])


PROJECTED_LINE = ["--project", "pcie4", "--project-devices", "2", "8", "--gpu", "a100"]
PROJECTED_LINE += ["--precision", "fp16", "--project-batch", "2048", "--compute", "counted"]


def test_the_projection_options_reach_both_front_ends_and_the_panel_as_one_request():
    cli = request_from(_cli("compare").parse_args(PROJECTED_LINE), model="mlp", data=None)
    magic = request_from(magics.compare.parser.parse_args(PROJECTED_LINE), model="mlp", data=None)
    panel = request_from(magics.panel.parser.parse_args(PROJECTED_LINE), model="mlp", data=None)
    assert cli == magic == panel
    assert cli._projection() == {
        "preset": "pcie4",
        "devices": [2, 8],
        "device": "a100",
        "precision": "fp16",
        "global_batch": 2048,
        "compute": "counted",
    }
    # Unset, each is the projection's own default; without --project there is none.
    bare = request_from(_cli("compare").parse_args(["--project", "nvlink4"]), "mlp", None)
    assert bare._projection() == {"preset": "nvlink4"}
    assert request_from(_cli("run").parse_args([]), "mlp", None)._projection() is None


def test_the_projection_keywords_are_comparison_projects_own():
    from gpu_parallel_kit.analysis.cost_model.projected_rows import ProjectionOptions
    from gpu_parallel_kit.comparison import Comparison
    from gpu_parallel_kit.options.projection import PROJECTION, PROJECTION_ARGUMENTS

    assert [o.name for o in PROJECTION] == list(PROJECTION_ARGUMENTS)
    taken = {
        *inspect.signature(Comparison.project).parameters,
        *(field.name for field in dataclasses.fields(ProjectionOptions)),
    }
    assert set(PROJECTION_ARGUMENTS.values()) <= taken


@pytest.mark.parametrize(
    ("asked", "named"),
    [
        ({"project": "nvlink9"}, "'nvlink4', 'nvlink3', 'pcie5', 'pcie4', 'pcie3'"),
        ({"project": "nvlink4", "gpu": "b200"}, "'a100', 'h100', 'h200'"),
        ({"project": "nvlink4", "precision": "int4"}, "'fp32', 'tf32', 'bf16', 'fp16'"),
    ],
)
def test_an_unknown_preset_is_one_sentence_naming_the_presets_before_any_run(asked, named):
    from gpu_parallel_kit.errors import GpkError

    with pytest.raises(GpkError, match=named) as caught:
        Request(model="mlp", **asked).experiment(progress=False)
    assert str(caught.value).count(". ") == 0
