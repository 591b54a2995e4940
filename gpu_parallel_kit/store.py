"""The run log: every finished run appended to a SQLite file, so nothing measured is lost.

The log is `gpk_runs.sqlite` in the current working directory unless `GPK_LOG` names another
file, both read when a log is opened, not at import. The name `":memory:"` keeps the log in
memory, as SQLite's own does: it lives as long as its `RunLog` and writes no file. Why SQLite
and JSON rows, never a pickle: `docs/results.md`, "The report and the run log".
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import warnings
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import pandas as pd

from .analysis.tables.compact_view import RunTable
from .analysis.tables.comparison_table import comparison_table
from .errors import GpkError
from .runs.results.run_result import RunResult
from .runs.scheduling.comparison_rounds import merge_logged_rounds

LOG_ENV = "GPK_LOG"
DEFAULT_FILENAME = "gpk_runs.sqlite"
IN_MEMORY = ":memory:"
TIMEOUT_S = 30.0  # how long a writer waits for another process's lock before giving up

_CREATE = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    experiment_id TEXT NOT NULL,
    created_at TEXT NOT NULL,
    strategy TEXT NOT NULL,
    devices INTEGER NOT NULL,
    status TEXT NOT NULL,
    result_json TEXT NOT NULL
)
"""
_INSERT = (
    "INSERT INTO runs (run_id, experiment_id, created_at, strategy, devices, status, result_json)"
    " VALUES (?, ?, ?, ?, ?, ?, ?)"
)


def log_path(path: str | os.PathLike[str] | None = None) -> Path:
    """The absolute path of the log: `path`, else `$GPK_LOG`, else `./gpk_runs.sqlite`."""
    chosen = path if path is not None else os.environ.get(LOG_ENV) or DEFAULT_FILENAME
    return Path(chosen).expanduser().absolute()


class RunLog:
    """An append-only log of `RunResult`s in one SQLite file.

    Each call opens and closes its own short-lived connection, so a `RunLog` holds no lock
    between calls and can be shared freely between threads and processes.

    >>> log = RunLog("runs.sqlite")  # doctest: +SKIP
    >>> log.append(result)  # doctest: +SKIP
    >>> log.table()  # doctest: +SKIP
    """

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self._memory: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        if path is not None and os.fspath(path) == IN_MEMORY:
            self.path = Path(IN_MEMORY)
            # One connection for the log's life: an in-memory database ends with its connection.
            self._memory = sqlite3.connect(IN_MEMORY, check_same_thread=False)
        else:
            # Resolved now: a later chdir must not move the log of an experiment in progress.
            self.path = log_path(path)

    def __repr__(self) -> str:
        return f"<RunLog {self.path}>"

    @property
    def in_memory(self) -> bool:
        """Whether the log lives in memory (`":memory:"`) rather than in a file."""
        return self._memory is not None

    @contextmanager
    def connect(self, *, read_only: bool = False) -> Iterator[sqlite3.Connection | None]:
        """A connection to the log, or `None` when reading a log file that does not exist."""
        if self._memory is not None:
            with self._lock:
                yield self._memory
            return
        if read_only:
            if not self.path.exists():
                yield None  # reading must not create an empty log file as a side effect
                return
            target, uri = f"{self.path.as_uri()}?mode=ro", True
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            target, uri = str(self.path), False
        with closing(sqlite3.connect(target, uri=uri, timeout=TIMEOUT_S)) as connection:
            yield connection

    def append(self, result: RunResult) -> None:
        """Store `result` and commit at once; the log file and table are created if missing."""
        row = (
            result.run_id,
            result.experiment_id,
            result.created_at,
            result.strategy,
            int(result.devices),
            result.status,
            result.to_json(),
        )
        with self.connect() as connection:
            try:
                with connection:  # commits on success, rolls back on error
                    connection.execute(_CREATE)
                    connection.execute(_INSERT, row)
            except sqlite3.IntegrityError as error:
                raise GpkError(
                    f"run_id={result.run_id!r} is already in the run log {self.path}; "
                    "give each run a new id"
                ) from error
            except sqlite3.DatabaseError as error:
                if _is_not_sqlite(error):
                    raise _not_a_log(self.path) from error
                raise

    def results(self) -> list[RunResult]:
        """Every stored result, oldest first. Rows this version cannot read are skipped with a
        warning rather than hiding the whole history."""
        loaded = []
        for run_id, text in self._rows():
            try:
                loaded.append(RunResult.from_json(text))
            except (ValueError, TypeError) as error:
                warnings.warn(
                    f"run {run_id!r} in {self.path} cannot be read by this version of the kit "
                    f"({error}); it is left out",
                    stacklevel=2,
                )
        return loaded

    def table(self, *, per_round: bool = False) -> pd.DataFrame:
        """The comparison table of the stored runs (includes `experiment_id` and `created_at`;
        speedup is computed within each experiment): one row per configuration, a comparison's
        rounds merged as the comparison merged them, or with `per_round=True` one row per run,
        each round's speedup against its own round's baseline."""
        results = self.results()
        return comparison_table(results if per_round else merge_logged_rounds(results))

    def _rows(self) -> list[tuple[str, str]]:
        with self.connect(read_only=True) as connection:
            if connection is None:
                return []
            try:
                if not connection.execute(
                    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'runs'"
                ).fetchone():
                    return []
                # rowid grows with each insert, so it is the insertion order.
                return connection.execute(
                    "SELECT run_id, result_json FROM runs ORDER BY rowid"
                ).fetchall()
            except sqlite3.DatabaseError as error:
                if _is_not_sqlite(error):
                    raise _not_a_log(self.path) from error
                raise


_CREATE_COUNTS = """
CREATE TABLE IF NOT EXISTS work_counts (
    work_key TEXT NOT NULL,
    experiment_id TEXT NOT NULL,
    count_json TEXT NOT NULL,
    PRIMARY KEY (work_key, experiment_id)
)
"""


class WorkCounts:
    """Counted steps (`analysis.cost_model.counted_work.WorkCount` as JSON) in the run log's file,
    keyed by model, input shape and batches (`runs.scheduling.step_counting.work_key`) and by the
    experiments that used them, so a later projection, from the same experiment or from the log's
    rows, counts nothing."""

    def __init__(self, log: RunLog) -> None:
        self.log = log
        self.path = log.path

    def by_key(self, key: str) -> str | None:
        return self._one("SELECT count_json FROM work_counts WHERE work_key = ?", key)

    def by_experiment(self, experiment_id: str) -> str | None:
        query = "SELECT count_json FROM work_counts WHERE experiment_id = ?"
        return self._one(query, experiment_id)

    def stored(self, experiment_id: str) -> dict[str, Any] | str:
        """The count an experiment's projection used, read back (a `Comparison`'s counter for
        rows rebuilt from the log); one sentence when the log holds none."""
        found = self.by_experiment(experiment_id)
        if found is None:
            return (
                f"experiment {experiment_id} has no counted step in {self.path.name}; project "
                "it from its Experiment once to count it"
            )
        return json.loads(found)

    def save(self, key: str, experiment_id: str, count_json: str) -> None:
        row = (key, experiment_id, count_json)
        with self.log.connect() as connection, connection:
            connection.execute(_CREATE_COUNTS)
            connection.execute("INSERT OR REPLACE INTO work_counts VALUES (?, ?, ?)", row)

    def _one(self, query: str, value: str) -> str | None:
        with self.log.connect(read_only=True) as connection:
            if connection is None:
                return None
            try:
                row = connection.execute(query, (value,)).fetchone()
            except sqlite3.OperationalError:  # no table yet: nothing counted
                return None
        return row[0] if row else None


def history(path: str | os.PathLike[str] | None = None, *, per_round: bool = False) -> pd.DataFrame:
    """The runs in the run log as a comparison table, oldest first.

    One row per configuration: a comparison's rounds are merged into one row, as the
    comparison showed it (the median of the rounds' median steps, with its interval). Every
    column is there; a notebook displays the compact view
    (`analysis.tables.compact_view.RunTable`). An empty table with the usual columns when there
    is no log yet.

    Args:
        path: the run log; default `$GPK_LOG`, else `./gpk_runs.sqlite`.
        per_round: one row per run instead, each round of a comparison on its own row, its
            speedup against the baseline of its own round.

    >>> gpk.history()  # doctest: +SKIP
    >>> gpk.history(per_round=True)  # doctest: +SKIP
    """
    return RunTable(RunLog(path).table(per_round=per_round))


def _is_not_sqlite(error: sqlite3.DatabaseError) -> bool:
    # Only this one is the user's to fix; a lock timeout or a full disk stays the error it is.
    return getattr(error, "sqlite_errorname", "") == "SQLITE_NOTADB"


def _not_a_log(path: Path) -> GpkError:
    return GpkError(
        f"{path} is not a gpk run log (not a SQLite file); "
        f"move it away or set {LOG_ENV} to another file"
    )
