"""`%gpk` through a real IPython shell: help, one-line errors, and real runs (slow)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from IPython.core.error import UsageError

import gpu_parallel_kit as gpk
from tests import builders


def displayed(ipython) -> list[dict]:
    """The mime bundles displayed since the last call."""
    bundles = [output["data"] for output in ipython.display_pub.outputs]
    ipython.display_pub.outputs.clear()
    return bundles


def usage_error(ipython, line: str) -> str:
    with pytest.raises(UsageError) as caught:
        ipython.run_line_magic("gpk", line)
    return str(caught.value)


# ---- help and argument errors: no worker starts ------------------------------------------------


def test_help_lists_every_command(shell, capsys):
    shell.run_line_magic("gpk", "")
    text = capsys.readouterr().out
    for command in ("devices", "run", "compare", "panel", "history", "virtual"):
        assert f"\n  {command} " in text
    assert "cmp = %gpk compare build_model --data x y" in text
    assert "Commands:" in shell.find_line_magic("gpk").__doc__


def test_command_help_shows_its_options(shell, capsys):
    assert shell.run_line_magic("gpk", "compare --help") is None
    text = capsys.readouterr().out
    assert "%gpk compare" in text
    for option in ("--strategies", "--devices", "--batch-size", "--micro-batches", "--timeout"):
        assert option in text


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("comapre", "invalid choice: 'comapre'"),
        ("compare --strategies single magic", "invalid choice: 'magic'"),
        ("compare --devices two", "'two' is not a whole number"),
        ("run --devices 0,x", "'0,x' is not a count like 2 or indices like 0,1"),
        ("compare --batch-size 0", "0 is not a positive whole number"),
        ("compare --frobnicate", "unrecognized arguments: --frobnicate"),
        ("virtual 0", "0 is not a positive whole number"),
    ],
)
def test_bad_arguments_are_one_line(shell, line, message):
    text = usage_error(shell, line)
    assert message in text
    assert "\n" not in text


def test_names_resolve_in_the_notebook_or_say_what_is_missing(shell):
    text = usage_error(shell, "compare build_model --data x y")
    assert "model 'build_model' is not defined in this notebook" in text
    assert "mlp, cnn, transformer" in text
    shell.user_ns["build_model"] = builders.small_mlp
    assert "--data x is not defined in this notebook" in usage_error(
        shell, "compare build_model --data x y"
    )
    assert "not a built-in set (tabular, images, tokens)" in usage_error(
        shell, "compare build_model --data nope"
    )
    assert "data= is missing" in usage_error(shell, "compare build_model")


def test_the_kits_own_sentence_reaches_the_user(shell, fake_cpu):
    x, y = builders.small_data()
    shell.user_ns.update(build_model=builders.small_mlp, x=x, y=y)
    assert "batch_size=250 is not divisible by 4 devices; use a multiple of 4" in usage_error(
        shell, "compare build_model --data x y --batch-size 250 --devices 1 4"
    )
    assert "schedule='naive' runs one micro-batch" in usage_error(
        shell,
        "run build_model --data x y --strategy model --devices 2 --schedule naive "
        "--micro-batches 4",
    )
    assert "devices=9 is more than the 8 devices" in usage_error(
        shell, "run build_model --data x y --strategy data --devices 9"
    )
    assert "devices=2 per worker needs GPUs" in usage_error(
        shell, "run build_model --data x y --strategy multiworker --workers 2 --devices 2"
    )


class BuiltModel:
    """Stands for a built Keras model (what the kit recognises it by: a `fit` method)."""

    def fit(self) -> None: ...


def test_a_built_model_is_refused_with_the_fix(shell, fake_cpu):
    shell.user_ns["model"] = BuiltModel()
    text = usage_error(shell, "panel model --data tabular")
    assert "pass a function that builds it" in text


def test_panel_opens_once_with_the_options_as_starting_values(shell, fake_cpu):
    from gpu_parallel_kit.notebook import Panel

    shell.run_cell("%gpk panel mlp --batch-size 512 --steps-per-epoch 4", store_history=True)
    (bundle,) = displayed(shell)  # once, although the line's value is a Panel
    assert "application/vnd.jupyter.widget-view+json" in bundle
    shell.run_cell("p = %gpk panel mlp --micro-batches 4", store_history=True)
    assert len(displayed(shell)) == 1
    panel = shell.user_ns["p"]
    assert isinstance(panel, Panel)
    assert panel.controls.micro_batches.value == 4
    assert panel.controls.schedule.value == "gpipe"  # the API's default with micro-batches
    assert panel.plan("run").request.model == "mlp"


def test_virtual_sets_the_limit_the_kit_reads(shell, fake_cpu, capsys, monkeypatch):
    shell.run_line_magic("gpk", "virtual 3")
    assert os.environ["GPK_MAX_VIRTUAL"] == "3"
    assert "Up to 3 virtual devices" in capsys.readouterr().out
    assert len(shell.run_line_magic("gpk", "devices")) == 3
    shell.run_line_magic("gpk", "virtual")
    assert "Up to 3 virtual devices" in capsys.readouterr().out


def test_history_of_an_empty_log_is_an_empty_table(shell):
    for line in ("history", "history --per-round"):
        table = shell.run_line_magic("gpk", line)
        assert table.empty
        assert "speedup" in table.columns


# ---- real workers -------------------------------------------------------------------------------

NO_TENSORFLOW = textwrap.dedent(
    """
    import sys
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config
    config = Config()
    config.HistoryManager.enabled = False
    shell = InteractiveShell.instance(config=config)
    shell.run_line_magic("load_ext", "gpu_parallel_kit")
    loaded = "tensorflow" in sys.modules
    table = shell.run_line_magic("gpk", "devices")
    print(loaded, "tensorflow" in sys.modules, len(table), flush=True)
    """
)


@pytest.mark.slow
def test_loading_and_listing_devices_never_import_tensorflow(tmp_path):
    env = {**os.environ, "IPYTHONDIR": str(tmp_path), "GPK_MAX_VIRTUAL": "4"}
    done = subprocess.run(
        [sys.executable, "-c", NO_TENSORFLOW], env=env, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False", "4"]


@pytest.mark.slow
def test_compare_is_displayed_once_and_returned(shell):
    x, y = builders.small_data()
    shell.user_ns.update(build_model=builders.small_mlp, x=x, y=y)
    line = (
        "%gpk compare build_model --data x y --strategies single data --devices 1 2 "
        "--batch-size 32 --steps-per-epoch 3 --no-progress"
    )
    result = shell.run_cell(line, store_history=True)  # as a notebook cell: not assigned
    assert result.success, result.error_in_exec
    assert [sorted(b) for b in displayed(shell)] == [
        ["text/html", "text/plain"],
        ["image/png", "text/plain"],
    ]
    line = line.replace("--devices 1 2", "--devices 1")
    shell.run_cell("cmp = " + line, store_history=True)  # assigned: shown all the same
    bundles = displayed(shell)
    assert len(bundles) == 2 and "gpk-table" in bundles[0]["text/html"]
    cmp = shell.user_ns["cmp"]
    assert isinstance(cmp, gpk.Comparison)
    assert list(cmp.table["strategy"]) == ["single", "data"]
    assert set(cmp.table["status"]) == {"ok"}
    shell.run_cell("cmp", store_history=True)  # a later cell shows it again
    assert len(displayed(shell)) == 2
    assert len(shell.run_line_magic("gpk", "history --limit 2")) == 2


@pytest.mark.slow
def test_run_model_shows_its_row_and_pipeline(shell):
    r = shell.run_line_magic(
        "gpk",
        "run mlp --strategy model --devices 2 --micro-batches 2 --batch-size 64 "
        "--steps-per-epoch 3 --no-progress",
    )
    # "model", the seed's word, is the pipeline's alias: the row and the table say pipeline
    assert r.ok and r.strategy == "pipeline" and r.schedule == "gpipe"
    table, chart = displayed(shell)
    assert "pipeline" in table["text/html"] and "image/png" in chart


@pytest.mark.slow
def test_run_multiworker_from_the_magic(shell):
    r = shell.run_line_magic(
        "gpk", "run mlp --strategy multiworker --workers 2 --steps-per-epoch 3 --no-progress"
    )
    assert r.ok, r.reason
    assert (r.strategy, r.workers, r.devices, r.mode) == ("multiworker", 2, 2, "explicit")
