"""write_report puts table and plots in one folder; reporting modules stay TensorFlow-free."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import pandas as pd  # noqa: E402

from gpu_parallel_kit.analysis.tables.comparison_table import ALL_COLUMNS, comparison_table  # noqa: E402
from gpu_parallel_kit.report import write_report  # noqa: E402
from gpu_parallel_kit.runs.results.run_result import RunResult  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def table():
    return comparison_table(
        [
            RunResult("s", "exp", "single", 1, True, "ok", throughput_samples_s=100.0),
            RunResult("d2", "exp", "data", 2, True, "ok", throughput_samples_s=200.0),
            RunResult("d4", "exp", "data", 4, True, "timeout", reason="no step in 600 s"),
        ]
    )


def test_report_writes_table_and_plots_into_a_new_folder(tmp_path):
    folder = tmp_path / "reports" / "first"
    written = write_report(table(), folder)
    assert [path.name for path in written] == [
        "table.csv",
        "table.md",
        "wall_time.png",
        "throughput.png",
        "speedup.png",
        "communication.png",
    ]
    assert all(path.parent == folder and path.stat().st_size > 0 for path in written)
    for png in written[2:]:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    back = pd.read_csv(folder / "table.csv")
    assert list(back.columns) == list(ALL_COLUMNS)
    assert list(back["speedup"][:2]) == [1.0, 2.0]
    assert back["status"][2] == "timeout"
    assert (folder / "table.md").read_text(encoding="utf-8").startswith("| run_id")


def test_report_of_no_runs_still_writes_every_file(tmp_path):
    written = write_report(comparison_table([]), tmp_path)
    assert len(written) == 6
    assert all(path.exists() for path in written)


def test_reporting_modules_never_import_tensorflow_or_keras():
    code = (
        "import sys\n"
        "import gpu_parallel_kit.report, gpu_parallel_kit.store\n"
        "loaded = sorted(m for m in ('tensorflow', 'keras') if m in sys.modules)\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=120)
