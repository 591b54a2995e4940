"""The panel and the notebooks in a real browser: JupyterLab on 127.0.0.1, Debian's Chromium
driven by Playwright.

Follows /work/shared/notes/browser-testing.md: the server gets its own config, runtime, IPython
and settings folders (news pop-up silenced), the notebook is opened with `?reset`, and every
selector is scoped to the visible notebook and the panel's `gpk-panel` class. Notebooks are
copies in the test's folder, so Lab's autosave never touches the repository's files.

The panel is clicked in a live kernel. The notebooks are not run again here: the copies that
tests/test_notebooks.py executed (the `executed_notebooks` fixture) are opened with their
outputs, which is what a student sees, in seconds instead of minutes.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import nbformat
import pytest

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
NOTEBOOK = NOTEBOOKS / "panel.ipynb"
# Lab's stderr output: the red box a student sees when a worker or TensorFlow writes to stderr.
STDERR = ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"
TOKEN = "gpk-browser-test"
NOTIFICATIONS = {"fetchNews": "false", "checkForUpdates": False, "doNotDisturbMode": True}
NB = ".jp-NotebookPanel:not(.lm-mod-hidden)"
PANEL = f"{NB} .gpk-panel"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _get(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return answer.read() if answer.status == 200 else None
    except OSError:
        return None


def _delete(url: str) -> None:
    with contextlib.suppress(OSError):
        urllib.request.urlopen(urllib.request.Request(url, method="DELETE"), timeout=10)


@pytest.fixture
def lab(tmp_path):
    """A JupyterLab server with copies of the notebooks; yields its base URL."""
    root = tmp_path / "root"
    root.mkdir()
    for notebook in NOTEBOOKS.glob("*.ipynb"):
        shutil.copy(notebook, root / notebook.name)
    with _serving_lab(root, tmp_path) as base:
        yield base


@contextlib.contextmanager
def _serving_lab(root: Path, tmp_path: Path, settings: dict[str, dict] | None = None):
    """JupyterLab on 127.0.0.1 serving `root`, its state under `tmp_path`, the news pop-up
    silenced and `settings` ({"plugin/file": {...}}) written; yields its base URL, and ends its
    kernels and itself afterwards."""
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is missing: apt-get install -y chromium (see .ci/run)")
    pytest.importorskip("playwright", reason="pip install playwright (never `playwright install`)")
    state = tmp_path / "lab"
    chosen = {"apputils-extension/notification": NOTIFICATIONS, **(settings or {})}
    for name, values in chosen.items():
        path = state / "settings" / "@jupyterlab" / f"{name}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(state / "config"),
        "JUPYTER_RUNTIME_DIR": str(state / "runtime"),
        "JUPYTER_DATA_DIR": str(state / "data"),  # the notary's secret: `_trusted` signs with it
        "IPYTHONDIR": str(state / "ipython"),
        "GPK_QUICK": "1",
        "GPK_ROUNDS": "1",  # the panel's comparison once per configuration: CI's time
        "GPK_LOG": str(tmp_path / "gpk_runs.sqlite"),
    }
    port = _free_port()
    command = [
        sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", "--ip=127.0.0.1",
        f"--port={port}", f"--ServerApp.token={TOKEN}", "--ServerApp.port_retries=0",
        f"--ServerApp.root_dir={root}", f"--LabApp.workspaces_dir={state / 'ws'}",
        f"--LabApp.user_settings_dir={state / 'settings'}",
    ]  # fmt: skip
    log = (tmp_path / "lab.log").open("w")
    server = subprocess.Popen(
        command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while _get(f"{base}/api/status?token={TOKEN}") is None:
            assert server.poll() is None, (tmp_path / "lab.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "JupyterLab did not answer within 60 s"
            time.sleep(0.3)
        yield base
    finally:
        _end_kernels(base)  # a kernel ends its run workers with it
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()


def _end_kernels(base: str) -> None:
    for kernel in json.loads(_get(f"{base}/api/kernels?token={TOKEN}") or b"[]"):
        _delete(f"{base}/api/kernels/{kernel['id']}?token={TOKEN}")


def test_compare_from_the_panel_in_jupyterlab(lab, tmp_path):
    from playwright.sync_api import expect

    with _running_all_cells(lab, NOTEBOOK.name) as (page, _):
        panel = page.locator(PANEL)
        expect(panel).to_be_visible(timeout=90_000)
        _wait_for_all_cells(page)

        # exactly "Compare": the plan section's "compare the top 3 here" holds the word too
        compare = panel.locator("button.widget-button", has_text=re.compile("^Compare$"))
        expect(compare).to_be_enabled()
        compare.click()
        expect(compare).to_be_disabled(timeout=10_000)
        table = panel.locator(".widget-output table.gpk-table")
        expect(table).to_be_visible(timeout=240_000)
        expect(compare).to_be_enabled(timeout=60_000)
        expect(panel.locator(".gpk-error")).to_have_count(0)
        expect(panel).to_contain_text("Done in")
        expect(table).to_contain_text("single")
        expect(table.locator("tbody tr")).to_have_count(4)  # single, data×1, ×2, ×4
        expect(panel.locator(".widget-hprogress .progress-bar")).to_have_count(4)
        panel.screenshot(path=str(tmp_path / "panel-table.png"))

        panel.locator(".lm-TabBar-tab", has_text="speedup").click()
        image = panel.locator(".gpk-tab-speedup img")
        expect(image).to_be_visible(timeout=10_000)
        assert image.evaluate("img => img.naturalWidth") > 300
        panel.scroll_into_view_if_needed()
        shot = tmp_path / "panel.png"
        page.screenshot(path=str(shot), full_page=True)
        panel.screenshot(path=str(tmp_path / "panel-only.png"))
        assert shot.stat().st_size > 10_000
        expect(page.locator(f"{NB} {STDERR}")).to_have_count(0)
        print(f"screenshots in {tmp_path}")


WINDOW = {"width": 1280, "height": 900}  # a laptop's window; Lab opens with its file browser
# Every cell rendered, not only those in view, so every table is laid out and measured.
ALL_CELLS = {"notebook-extension/tracker": {"windowingMode": "none"}}
# Each table in an output area: its width and the area's, and the cell it is in.
MEASURE = """selector => [...document.querySelectorAll(selector)].map(table => {
    const area = table.closest('.jp-OutputArea-output');
    const cells = [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell')];
    return {cell: cells.indexOf(table.closest('.jp-Cell')), width: table.scrollWidth,
            room: area.clientWidth};
})"""
TABLES = f"{NB} .jp-OutputArea-output table"


@pytest.mark.after_notebooks
@pytest.mark.timeout(3600)  # run alone, it executes the notebooks itself first
def test_every_table_fits_its_output_area_in_every_notebook(executed_notebooks, tmp_path):
    """Every notebook as tests/test_notebooks.py executed it, opened in JupyterLab with its
    outputs and no cell run: in a 1,280 px window with the file browser open, no table is wider
    than its output area, and no cell of any notebook shows a stderr box (TensorFlow's
    start-up chatter, a failed cuInit, AutoGraph warnings)."""
    from playwright.sync_api import expect

    root = tmp_path / "root"
    root.mkdir()
    for notebook in sorted(NOTEBOOKS.glob("*.ipynb")):
        _trusted(executed_notebooks(notebook), root / notebook.name, tmp_path / "lab" / "data")
    too_wide, stderr = {}, {}
    with _serving_lab(root, tmp_path, ALL_CELLS) as base, _chromium() as browser:
        page = browser.new_page(viewport=WINDOW)
        for notebook in sorted(root.glob("*.ipynb")):
            page.goto(f"{base}/lab/tree/{notebook.name}?reset&token={TOKEN}")
            expect(page.locator("#filebrowser")).to_be_visible(timeout=60_000)
            page.wait_for_function(
                "([selector, n]) => document.querySelectorAll(selector).length >= n",
                arg=[TABLES, _html_tables(notebook)],
                timeout=60_000,
            )
            page.screenshot(path=str(tmp_path / f"{notebook.stem}.png"))
            widths = page.evaluate(MEASURE, TABLES)
            too_wide[notebook.name] = [w for w in widths if w["width"] > w["room"]]
            # Every cell is rendered (`ALL_CELLS`), so a box below the fold is counted too.
            stderr[notebook.name] = page.locator(f"{NB} {STDERR}").all_inner_texts()
            _end_kernels(base)  # Lab started one for the notebook; no cell ran in it
    assert not any(too_wide.values()), {name: w for name, w in too_wide.items() if w}
    assert not any(stderr.values()), {name: text for name, text in stderr.items() if text}
    print(f"screenshots in {tmp_path}")


def _trusted(source: Path, copy: Path, data_dir: Path) -> None:
    """`source` copied to `copy`, signed as the server will check it: Lab renders an untrusted
    notebook's HTML without its <style>, so the tables would be measured wider than a student,
    whose outputs their own kernel made, sees them."""
    from nbformat.sign import NotebookNotary

    notebook = nbformat.read(source, as_version=4)
    data_dir.mkdir(parents=True, exist_ok=True)
    NotebookNotary(data_dir=str(data_dir)).sign(notebook)
    nbformat.write(notebook, copy)


def _html_tables(notebook: Path) -> int:
    """How many HTML tables the executed notebook's outputs hold."""
    cells = nbformat.read(notebook, as_version=4).cells
    outputs = [o for cell in cells if cell.cell_type == "code" for o in cell.outputs]
    return sum(str(o.get("data", {}).get("text/html", "")).count("<table") for o in outputs)


@contextlib.contextmanager
def _chromium():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield browser
        finally:
            browser.close()


@contextlib.contextmanager
def _running_all_cells(lab: str, name: str):
    """Chromium on JupyterLab with notebook `name` open, its kernel idle, then Run All clicked:
    yields (the page, the kernel status item); the browser is closed afterwards."""
    from playwright.sync_api import expect

    with _chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{lab}/lab/tree/{name}?reset&token={TOKEN}")
        kernel_status = page.locator(".jp-StatusBar-TextItem[title^='Change kernel']")
        expect(kernel_status).to_have_text("Python 3 (ipykernel) | Idle", timeout=90_000)
        page.locator("li.lm-MenuBar-item", has_text="Run").click()
        page.locator("li.lm-Menu-item[data-command='runmenu:run-all']").click()
        yield page, kernel_status


def _wait_for_all_cells(page, timeout_s: float = 180) -> None:
    """Every code cell has run: a number in each prompt, none still '*' (running or queued)."""
    page.wait_for_function(
        """selector => {
            const prompts = [...document.querySelectorAll(selector)];
            return prompts.length > 0 && prompts.every(p => /\\[\\d+\\]/.test(p.textContent));
        }""",
        arg=f"{NB} .jp-CodeCell .jp-InputPrompt",
        timeout=timeout_s * 1000,
    )


# The notebook the panel-alone test opens: a small GPT (keras-hub's GPT-2) with its tokens, and
# notebook 09's mixture of experts with its data (its first cell, as a student runs it), each in
# a panel. Every run after is driven by clicks.
GPT_CELL = '''\
import numpy as np

%load_ext gpu_parallel_kit


def gpt_small():
    """A 4-block GPT-2 from keras-hub and a dense layer from each position to the next token."""
    import keras
    import keras_hub

    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=256, num_layers=4, num_heads=4, hidden_dim=64, intermediate_dim=256,
        max_sequence_length=32)
    inputs = {name: keras.Input((32,), dtype="int32", name=name)
              for name in ("token_ids", "padding_mask")}
    logits = keras.layers.Dense(256, name="next_token")(backbone(inputs))
    model = keras.Model(inputs, logits)
    model.compile(optimizer="adam",
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


tokens = np.random.default_rng(0).integers(1, 256, (256, 33)).astype("int32")
gx = {"token_ids": tokens[:, :-1], "padding_mask": np.ones((256, 32), "int32")}
gy = tokens[:, 1:]  # the next token at each position
'''
GPT_PANEL = "%gpk panel gpt_small --data gx gy --batch-size 16 --steps-per-epoch 4 --backend jax"
EXPERTS_PANEL = (
    "%gpk panel tiny_mixtral --data x y --batch-size 32 --steps-per-epoch 4 --backend jax"
)
RUN_S = 600_000  # ms a click's runs may take on a 2-core machine
# Each table in the panels' output widgets: its width and its area's.
PANEL_TABLES = """selector => [...document.querySelectorAll(selector)]
    .filter(table => table.offsetParent !== null)
    .map(table => ({width: table.scrollWidth,
                    room: table.closest('.widget-output').clientWidth}))"""


def _panel_notebook(path: Path) -> None:
    """A notebook of the two panels: the GPT's, and notebook 09's mixture of experts'."""
    experts = nbformat.read(NOTEBOOKS / "09_mixture_of_experts.ipynb", as_version=4)
    first = next(cell.source for cell in experts.cells if cell.cell_type == "code")
    # (notebook 09's builder reads its global `experts`: the panel takes another name)
    cells = [GPT_CELL, f"panel = {GPT_PANEL}", first, f"moe_panel = {EXPERTS_PANEL}"]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    notebook.metadata["kernelspec"] = {
        "name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"
    }  # fmt: skip
    nbformat.write(notebook, path)


def _tick_only(panel, *names: str) -> None:
    """Tick exactly `names` among the panel's strategy boxes, by clicks."""
    from gpu_parallel_kit.strategies import runnable_names

    for name in runnable_names():
        box = (
            panel.locator(".widget-checkbox")
            .filter(has=panel.page.locator("span", has_text=re.compile(f"^{name}$")))
            .locator("input")
        )
        if box.is_checked() != (name in names):
            box.click()


def _click_and_wait(panel, button_text: str, done: str, timeout_ms: int = RUN_S) -> None:
    """Click the visible button `button_text` and wait until the panel says `done`, its buttons
    enabled again."""
    from playwright.sync_api import expect

    button = panel.locator("button.widget-button", has_text=re.compile(f"^{button_text}$"))
    button = button.filter(visible=True)
    expect(button).to_be_enabled()
    button.click()
    _started(panel, button)
    expect(panel).to_contain_text(done, timeout=timeout_ms)
    expect(button).to_be_enabled(timeout=60_000)


def _started(panel, button) -> None:
    """The click started work (its button disabled), so an earlier run's words do not count; a
    refusal (one red sentence) fails the test with that sentence."""
    errors = panel.locator(".gpk-error")
    deadline = time.monotonic() + 20
    while not button.is_disabled():
        if errors.count():
            raise AssertionError(f"refused: {errors.first.inner_text()}")
        assert time.monotonic() < deadline, "the click started nothing"
        time.sleep(0.1)


def _fits_and_no_stderr(page, tmp_path: Path, name: str, shown=None) -> None:
    """The panel's shown tables fit their areas, no red sentence, no stderr box; a screenshot
    with `shown` (a locator) in view."""
    from playwright.sync_api import expect

    if shown is not None:
        shown.scroll_into_view_if_needed()
    widths = page.evaluate(PANEL_TABLES, f"{NB} .gpk-panel .widget-output table")
    assert widths, f"{name}: no table shown"
    assert all(w["width"] <= w["room"] for w in widths), (name, widths)
    expect(page.locator(f"{NB} .gpk-error")).to_have_count(0)
    expect(page.locator(f"{NB} {STDERR}")).to_have_count(0)
    page.screenshot(path=str(tmp_path / f"{name}.png"), full_page=True)


@pytest.mark.timeout(3600)
def test_every_feature_through_the_panel_alone(tmp_path, monkeypatch):
    """At 1,280 px, with clicks only: a (2, 2) mesh tensor run, a two-worker data run, a plan
    search for a GPT on 4 × 8 H100s, "run here" on its best row, "compare the top 3 here", and
    a dispatched expert run of notebook 09's mixture of experts."""
    pytest.importorskip("keras_hub", reason='pip install "gpu_parallel_kit[hub]"')
    from playwright.sync_api import expect

    root = tmp_path / "root"
    root.mkdir()
    _panel_notebook(root / "panels.ipynb")
    with _serving_lab(root, tmp_path, ALL_CELLS) as base, _chromium() as browser:
        page = browser.new_page(viewport=WINDOW)
        page.goto(f"{base}/lab/tree/panels.ipynb?reset&token={TOKEN}")
        kernel_status = page.locator(".jp-StatusBar-TextItem[title^='Change kernel']")
        expect(kernel_status).to_have_text("Python 3 (ipykernel) | Idle", timeout=90_000)
        page.locator("li.lm-MenuBar-item", has_text="Run").click()
        page.locator("li.lm-Menu-item[data-command='runmenu:run-all']").click()
        panels = page.locator(PANEL)
        expect(panels).to_have_count(2, timeout=180_000)
        _wait_for_all_cells(page)
        try:
            _drive_every_feature(page, panels.nth(0), panels.nth(1), tmp_path, monkeypatch)
        except Exception:
            page.screenshot(path=str(tmp_path / "failed.png"))
            raise
        print(f"screenshots in {tmp_path}")


def _logged(monkeypatch, tmp_path: Path) -> Any:
    """The run log the lab's kernel wrote, as `gpk.history()` reads it."""
    import gpu_parallel_kit as gpk

    monkeypatch.setenv("GPK_LOG", str(tmp_path / "gpk_runs.sqlite"))
    return gpk.history()


def _drive_every_feature(page, gpt, experts, tmp_path: Path, monkeypatch) -> None:
    from playwright.sync_api import expect

    # A (2, 2) mesh tensor run: the mesh list offers the shapes of the 4 devices picked.
    _tick_only(gpt, "tensor")
    mesh = gpt.locator(".gpk-option-mesh select")
    expect(mesh).to_be_visible()
    labels = mesh.locator("option").all_inner_texts()
    assert labels == ["default", "1x4", "2x2", "4x1"], labels
    mesh.select_option(label="2x2")
    _click_and_wait(gpt, "Run", "Done in")
    expect(gpt.locator(".gpk-tab-table table")).to_contain_text("tensor")
    expect(gpt.locator(".gpk-tab-table table")).to_contain_text("2x2")
    _fits_and_no_stderr(page, tmp_path, "1-tensor-mesh-2x2", gpt.locator(".gpk-tab-table"))

    # A two-worker data run on 2 devices.
    _tick_only(gpt, "data")
    expect(mesh).to_be_hidden()
    gpt.locator(".widget-select-multiple select").select_option(index=[0, 1])
    workers = gpt.locator(".gpk-option-workers input")
    workers.fill("2")
    workers.press("Enter")
    _click_and_wait(gpt, "Run", "Done in")
    expect(gpt.locator(".gpk-tab-table table")).to_contain_text("data")
    _fits_and_no_stderr(page, tmp_path, "2-data-two-workers", gpt.locator(".gpk-tab-table"))
    last = _logged(monkeypatch, tmp_path).iloc[-1]
    assert (last["strategy"], last["workers"], last["status"]) == ("data", 2, "ok")

    # The plan search for the GPT on 4 × 8 H100s, then its best row and the top 3 run here.
    gpt.locator(".gpk-sections .lm-TabBar-tab", has_text="plan a cluster run").click()
    tab = gpt.locator(".gpk-plan-tab")
    expect(tab).to_be_visible()
    for name, value in (("nodes", "4"), ("GPUs per node", "8"), ("global batch", "512")):
        box = tab.locator(".widget-text", has_text=name).locator("input")
        box.fill(value)
        box.press("Enter")
    _click_and_wait(tab, "Search plans", "Searched in")
    expect(tab.locator(".gpk-plan-table")).to_contain_text("4x8 h100")
    expect(tab.locator(".gpk-plan-figure img")).to_be_visible()
    _fits_and_no_stderr(page, tmp_path, "3-plan-search-4x8-h100", tab.locator(".gpk-plan-table"))
    _fits_and_no_stderr(page, tmp_path, "3b-plan-plot-and-rows", tab.locator(".gpk-plan-rows"))
    best = tab.locator("button.gpk-run-here").first
    best.click()
    expect(best).to_be_disabled(timeout=10_000)
    expect(tab).to_contain_text("Ran plan #1 here", timeout=RUN_S)
    expect(tab.locator(".gpk-plan-ran table")).to_contain_text("ok")
    _fits_and_no_stderr(page, tmp_path, "4-run-best-plan-here", tab.locator(".gpk-plan-ran"))
    _click_and_wait(tab, "compare the top 3 here", "Ran the top 3 plans here")
    expect(tab.locator(".gpk-plan-ran table tbody tr")).to_have_count(3)
    _fits_and_no_stderr(page, tmp_path, "5-compare-top-3-here", tab.locator(".gpk-plan-ran"))
    ran = _logged(monkeypatch, tmp_path).tail(4)
    assert ran["scaled"].notna().all() and set(ran["status"]) == {"ok"}

    # A dispatched expert run of notebook 09's model.
    experts.scroll_into_view_if_needed()
    _tick_only(experts, "expert")
    experts.locator(".gpk-option-experts select").select_option("dispatched")
    _click_and_wait(experts, "Run", "Done in")
    expect(experts.locator(".gpk-tab-table table")).to_contain_text("expert")
    shown = experts.locator(".gpk-tab-table")
    _fits_and_no_stderr(page, tmp_path, "6-dispatched-experts", shown)
    last = _logged(monkeypatch, tmp_path).iloc[-1]
    assert (last["strategy"], last["experts"], last["status"]) == ("expert", "dispatched", "ok")
