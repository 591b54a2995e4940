"""Several inputs or outputs as arrays: flattened to files in the caller, rebuilt in the worker."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from gpu_parallel_kit.errors import GpkError
from gpu_parallel_kit.runs.description.nested_arrays import (
    flatten,
    is_structure,
    take_rows,
    unflatten,
    width,
)
from gpu_parallel_kit.runs.description.sources import ArrayStore, data_source
from gpu_parallel_kit.worker.run_data import arrays, sample_count

IDS = np.arange(24, dtype=np.int32).reshape(6, 4)
MASK = np.ones((6, 4), dtype=np.float32)
Y = np.arange(6)


@pytest.mark.parametrize(
    "x",
    [{"token_ids": IDS, "padding_mask": MASK}, [IDS, MASK], (IDS, MASK), IDS],
    ids=["dict", "list", "tuple", "array"],
)
def test_a_structure_crosses_to_the_worker_as_it_was_given(x):
    store = ArrayStore()  # the files live as long as their store, as the Experiment's do
    source = data_source((x, Y), seed=0, store=store)
    got_x, got_y = arrays(source)
    assert type(got_x) is type(x) or isinstance(x, np.ndarray)
    structure, leaves = flatten(x, "x")
    got_leaves = flatten(got_x, "x")[1]
    assert [label for label, _ in got_leaves] == [label for label, _ in leaves]
    for (_, want), (_, got) in zip(leaves, got_leaves, strict=True):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got_y, Y)
    assert sample_count(got_x) == 6 and width(structure) == len(leaves)


def test_a_plain_list_of_numbers_is_one_array_and_a_list_of_arrays_is_several():
    assert not is_structure([[1.0, 2.0], [3.0, 4.0]])
    assert is_structure([IDS, MASK])
    assert unflatten(("dict", ("a", "b")), [1, 2]) == {"a": 1, "b": 2}


def test_a_count_that_differs_names_the_key():
    differs = r"x\['token_ids'\] has 6 samples but x\['padding_mask'\] has 5"
    with pytest.raises(GpkError, match=differs):
        data_source(({"token_ids": IDS, "padding_mask": MASK[:5]}, Y), seed=0, store=None)
    with pytest.raises(GpkError, match="has 6 inputs but 4 targets"):
        data_source(({"token_ids": IDS}, Y[:4]), seed=0, store=None)


@pytest.mark.parametrize(
    ("x", "words"),
    [
        ({"a": {"b": IDS}}, "is itself a dict"),
        ({}, "empty dict"),
        ({"ids": np.array(object(), dtype=object)}, "Python objects"),
        ({"ids": 3.0}, "single number"),
    ],
)
def test_a_bad_structure_gets_one_sentence(x, words):
    with pytest.raises(GpkError, match=words):
        data_source((x, Y), seed=0, store=None)


def test_rows_are_taken_from_every_array():
    picked = take_rows({"token_ids": IDS, "padding_mask": MASK}, np.array([4, 1]))
    np.testing.assert_array_equal(picked["token_ids"], IDS[[4, 1]])
    assert picked["padding_mask"].shape == (2, 4)


def test_a_new_store_removes_the_data_of_ended_processes_only(tmp_path, monkeypatch):
    import os
    import subprocess
    import sys
    import tempfile

    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)  # fmt: skip
    orphan = tmp_path / f"gpk_data_{ended.stdout.strip()}_abc"
    mine = tmp_path / f"gpk_data_{os.getpid()}_def"
    legacy = tmp_path / "gpk_data_k3j2h1"  # no owner in its name: left alone
    for folder in (orphan, mine, legacy):
        folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    store = ArrayStore()
    assert not orphan.exists() and mine.exists() and legacy.exists()
    assert pathlib.Path(store.save("x", np.zeros(2))).parent.name.startswith(
        f"gpk_data_{os.getpid()}_"
    )
