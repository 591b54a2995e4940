"""Each strategy's options are listed on its record, and every place that shows or takes them reads
them from there: `Experiment.plan`'s signature, `RunSpec`, `gpk` and `%gpk`, the panel's Request
and the docs' option tables, which are hand-written and checked here against the records."""

from __future__ import annotations

import dataclasses
import inspect
import pathlib
import re

import pytest

import gpu_parallel_kit as gpk
from gpu_parallel_kit.api import Experiment
from gpu_parallel_kit.options.request import Request
from gpu_parallel_kit.options.table import TRAINING
from gpu_parallel_kit.strategies import (
    REGISTERED,
    Option,
    option_named,
    option_owners,
    options,
    strategy_record,
)
from tests.builders import small_mlp_experiment

DOCS = pathlib.Path(__file__).parents[2] / "docs"
# The page whose "## Options" section documents each strategy that takes options.
PAGES = {
    "data": DOCS / "strategies" / "data.md",
    "pipeline": DOCS / "strategies" / "pipeline.md",
    "multiworker": DOCS / "multiworker.md",
    "tensor": DOCS / "strategies" / "tensor.md",
    "fsdp": DOCS / "strategies" / "fsdp.md",
    "expert": DOCS / "strategies" / "expert.md",
}

pytestmark = pytest.mark.usefixtures("fake_machine")


def _options_section(page: pathlib.Path) -> str:
    text = page.read_text()
    start = text.index("\n## Options\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def _documented(section: str) -> dict[str, str]:
    """Option name -> its default column (a table row) or "" (a definition list's term)."""
    found = {}
    for line in section.splitlines():
        if row := re.match(r"\| `(\w+)` \|(.*)\|(.*)\|$", line):
            found[row[1]] = row[3].strip()
        elif term := re.fullmatch(r"`(\w+)`", line.strip()):
            found[term[1]] = ""
    return found


def _shown(default: object) -> str:
    return f'`"{default}"`' if isinstance(default, str) else f"`{default}`"


@pytest.mark.parametrize("record", [r for r in REGISTERED if r.options], ids=lambda r: r.name)
def test_each_strategys_page_lists_exactly_its_options_with_their_defaults(record):
    assert record.name in PAGES, f"{record.name} takes options: name its page in PAGES"
    documented = _documented(_options_section(PAGES[record.name]))
    own = {option.name: option for option in record.options}
    assert set(own) <= set(documented), f"{record.name}'s page lacks {set(own) - set(documented)}"
    others = {name for name in documented if option_named(name) is not None} - set(own)
    assert not others, f"{record.name}'s page lists {others}, which it does not take"
    for name, column in documented.items():
        if name in own and column and own[name].default is not None:
            assert _shown(own[name].default) in column, (record.name, name, column)


def test_no_page_lists_an_option_its_strategy_lacks():
    for page in (DOCS / "strategies").glob("*.md"):
        if page not in PAGES.values():
            listed = set(_documented(_options_section(page)))
            assert not {n for n in listed if option_named(n) is not None}, page.name


def test_the_command_lines_table_names_every_flag():
    table = (DOCS / "cli.md").read_text()
    for option in options():
        if option.type is not None:
            assert f"`{option.flag}" in table, option.flag


def test_every_option_is_a_keyword_of_plan_a_flag_and_a_request_field():
    plan = inspect.signature(Experiment.plan).parameters
    flags = {flag.name: flag for flag in TRAINING}
    fields = {field.name: field.default for field in dataclasses.fields(Request)}
    for option in options():
        assert plan[option.name].default == option.default, option.name
        if option.type is None:
            continue  # the API's alone: no text form
        assert flags[option.name].api_default == option.default
        assert flags[option.name].flag == option.flag
        assert fields[option.name] == option.default
        for record in option_owners(option.name):
            assert f"{record.name}" in flags[option.name].help


def test_strategies_sharing_an_option_agree_on_it():
    mesh = {r.name: next(o for o in r.options if o.name == "mesh") for r in option_owners("mesh")}
    assert set(mesh) == {"tensor", "fsdp", "pipeline", "expert"}
    assert mesh["pipeline"] is mesh["tensor"]  # a stage's sub-mesh is tensor's (data, model)
    assert mesh["tensor"].default == mesh["fsdp"].default is None
    assert "model axis" in mesh["tensor"].help and "data axis" in mesh["fsdp"].help


def test_a_switch_on_by_default_reads_no_on_the_command_line():
    recompute = option_named("recompute")
    assert recompute.switch and recompute.flag == "--no-recompute"
    assert Option("x", bool, False, "").flag == "--x"


def test_a_run_holds_its_strategys_options_and_reads_others_as_absent():
    spec = small_mlp_experiment().plan("pipeline", 2, micro_batches=4, schedule="1f1b")
    assert (
        spec.options.items()
        >= {
            "schedule": "1f1b",
            "micro_batches": 4,
            "balance": "params",
            "recompute": True,
            "virtual_stages": 1,
            "stages": 2,  # one device each, without a mesh
            "mesh": None,
            "layout_map": (),
        }.items()
    )
    assert (spec.schedule, spec.micro_batches, spec.workers, spec.mesh) == ("1f1b", 4, 1, None)
    data = small_mlp_experiment().plan("data", 2, micro_batches=4, schedule="1f1b")
    plain = {"workers": 1, "context": None, "sequence_parallel": False, "checkpointing": None}
    assert data.options == plain and (data.schedule, data.workers) == ("", 1)
    with pytest.raises(AttributeError, match="no attribute 'shedule'"):
        _ = spec.shedule


def test_an_unknown_option_is_one_sentence_naming_the_nearest():
    exp = small_mlp_experiment()
    with pytest.raises(TypeError, match=r"shedule= is not an option.*did you mean schedule=\?"):
        exp.run("pipeline", 2, shedule="1f1b")
    with pytest.raises(TypeError, match=r"timout= is not an option.*did you mean timeout=\?"):
        exp.compare(["single", "data"], [1, 2], timout=5)
    with pytest.raises(TypeError) as caught:
        exp.plan("data", 2, frobnicate=1)
    assert "drop it" in str(caught.value) and "\n" not in str(caught.value)
    with pytest.raises(TypeError, match=r"rounds= is an option of compare\(\), not of plan"):
        exp.run("data", 2, rounds=3)


def test_another_strategys_option_in_a_spec_is_one_sentence_naming_its_owners():
    spec = small_mlp_experiment().plan("data", 2)
    with pytest.raises(gpk.GpkError, match="mesh=.2, 1. applies to strategy=.*'tensor' or 'fsdp'"):
        dataclasses.replace(spec, options={"mesh": (2, 1)})
    with pytest.raises(gpk.GpkError, match="nope=1 is not an option of any strategy; drop it, or"):
        dataclasses.replace(spec, options={"nope": 1})
    pipeline = small_mlp_experiment().plan("pipeline", 2)
    with pytest.raises(gpk.GpkError, match="drop it, or use one of schedule, micro_batches"):
        dataclasses.replace(pipeline, options={**pipeline.options, "nope": 1})


def test_the_lookup_has_one_name():
    import gpu_parallel_kit.strategies as strategies

    assert strategy_record("model").name == "pipeline"
    assert not hasattr(strategies, "strategy")
    assert all(not hasattr(record, "workers") for record in REGISTERED)
