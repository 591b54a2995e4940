"""One sample's training step counted for a plan search: in a short child on the JAX server
(`worker/jax/plan_count.py`), shown as it goes, and kept, so the next search is instant. A
second short child reads a mixture of experts' routing and expert banks
(`worker/expert_banks.py`); a count kept from before they were read plans as dense.

A count is kept as a small JSON file in the user's cache folder
(`runs/processes/cache_folder.py`: `$GPK_CACHE_DIR`, else `$XDG_CACHE_HOME/gpu_parallel_kit`,
else `~/.cache/gpu_parallel_kit`), named by what it depends on: the model's definition (the
pickled builder, and its module's source when it is pickled by reference), the sample's shapes
and dtypes (its labels' too, and the loss, where given), the precision and the optimizer.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from ..errors import GpkError
from ..runs.description.sources import CountedSample, ModelSource
from ..runs.processes.cache_folder import cache_folder
from .phase_progress import PhaseProgress

# The counting child's entry point, named as text: the caller never imports the worker
# (tests/planning/test_step_count.py checks that it exists).
PLAN_COUNT_ENTRY = "gpu_parallel_kit.worker.jax.plan_count:count_for_plans"
# The child that reads a mixture of experts' routing and banks off the model, weights deferred.
EXPERTS_ENTRY = "gpu_parallel_kit.worker.expert_banks:read_experts"
COUNT_TIMEOUT_S = 3600.0  # GPT-3 175 B takes about 3 min on two cores; a larger model longer
POLL_S = 0.5
_counted: dict[str, dict[str, Any]] = {}  # this process's counts: a second search reads no file


def count_key(
    source: ModelSource, builder: Any, sample: CountedSample, policy: str, optimizer: Any
) -> str:
    """What a count depends on, as 32 hexadecimal digits."""
    digest = hashlib.sha256()
    inputs = json.dumps(sample.inputs, sort_keys=True)  # a dict's order and tuple or list alike
    for part in (source.kind, source.name, inputs, policy, repr(optimizer)):
        digest.update(str(part).encode())
        digest.update(b"\0")
    for part in (sample.labels, sample.loss):  # left out when absent: earlier keys stay valid
        if part is not None:
            digest.update(json.dumps(part, sort_keys=True, default=repr).encode())
            digest.update(b"\0")
    digest.update(source.payload)
    digest.update(_module_source(builder).encode())
    return digest.hexdigest()[:32]


def counted_step(
    source: ModelSource,
    builder: Any,
    sample: CountedSample,
    policy: str,
    optimizer: Any,
    progress: bool = True,
    cancel: threading.Event | None = None,
) -> dict[str, Any]:
    """The count (`worker/jax/plan_count.count_for_plans`'s answer, with "cached" saying whether
    it was kept from before): from this process, from the cache folder, else counted now (a
    set `cancel` ends the counting child and raises `SearchCancelled`)."""
    key = count_key(source, builder, sample, policy, optimizer)
    if key in _counted:
        return {**_counted[key], "cached": True}
    path = cache_folder() / "plan_counts" / f"{key}.json"
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        found = None
    if found is not None and (_experts_unplaced(found) or _layers_unread(found)):
        found = None  # counted before what its card now reads was: counted again
    if found is None:
        found = _count_in_child(source, sample, policy, optimizer, progress, cancel)
        _save(path, found)
        cached = False
    else:
        cached = True
    _counted[key] = found
    return {**found, "cached": cached}


def _layers_unread(found: dict[str, Any]) -> bool:
    """A model without Transformer blocks counted before the count read its layers one by one
    ("layer_infos"), which its card is made of."""
    return not found.get("structure") and "layer_infos" not in found


def _experts_unplaced(found: dict[str, Any]) -> bool:
    """A mixture of experts counted before the count named each layer's kept bytes
    ("kept_by_path"), which its card reads the banks' activations from."""
    return bool((found.get("experts") or {}).get("experts")) and "kept_by_path" not in found


class SearchCancelled(GpkError):
    """A search's count stopped by its `cancel` event; nothing was kept."""


def _count_in_child(
    source: ModelSource,
    sample: CountedSample,
    policy: str,
    optimizer: Any,
    progress: bool,
    cancel: threading.Event | None = None,
) -> dict[str, Any]:
    from ..runs.processes.child_process import start_child, stop_child

    shown = PhaseProgress(
        f"Counting one step of {source.name} (once; kept for later searches)", progress, "Counted"
    )
    try:
        process, receiver = start_child(
            PLAN_COUNT_ENTRY, source, sample, policy, optimizer, backend="jax"
        )
    except RuntimeError as error:
        shown.close()
        raise GpkError(
            f"the step of {source.name} could not be counted: the JAX worker did not start "
            f"({error}); install JAX (pip install jax) to search plans"
        ) from None
    started = time.monotonic()
    try:
        while True:
            if cancel is not None and cancel.is_set():
                raise SearchCancelled(
                    f"the search was stopped while counting the step of {source.name}; "
                    "nothing was kept, so the next search counts it again"
                )
            if time.monotonic() - started > COUNT_TIMEOUT_S:
                raise GpkError(
                    f"counting the step of {source.name} took over {COUNT_TIMEOUT_S:g} s; give "
                    "a shorter sample or fewer blocks"
                )
            if not receiver.poll(POLL_S):
                shown.tick()
                continue
            message = receiver.recv()
            if message[0] == "phase":
                shown.phase(message[1])
                continue
            succeeded, answer = message
            if not succeeded:
                raise GpkError(f"the step of {source.name} could not be counted: {answer}")
            shown.phase("reading its experts")
            return {**answer, "experts": _read_in_child(source, EXPERTS_ENTRY)}
    except EOFError:
        raise GpkError(
            f"the process counting the step of {source.name} ended without answering; the "
            "machine may be out of memory"
        ) from None
    finally:
        shown.close()
        receiver.close()
        stop_child(process)


def _read_in_child(source: ModelSource, entry: str) -> dict[str, Any]:
    """What a short JAX child answers of the model (`entry(source, sender)`), one sentence
    where it fails."""
    from ..runs.processes.child_process import start_child, stop_child

    process, receiver = start_child(entry, source, backend="jax")
    try:
        succeeded, answer = receiver.recv()
    except EOFError:
        raise GpkError(
            f"the process reading {source.name}'s experts ended without answering; the machine "
            "may be out of memory"
        ) from None
    finally:
        receiver.close()
        stop_child(process)
    if not succeeded:
        raise GpkError(f"the experts of {source.name} could not be read: {answer}")
    return answer


def _save(path: Path, count: dict[str, Any]) -> None:
    """Written whole or not at all: a search interrupted while writing leaves no half file."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps(count, default=str))
        partial.replace(path)
    except OSError:  # a read-only home: the count stays this process's alone
        pass


def _module_source(builder: Any) -> str:
    """The source of the builder's module, so an edit to a builder pickled by reference (one
    a module defines) counts again; "" when there is none to read."""
    module = inspect.getmodule(builder) if builder is not None else None
    if module is None or getattr(module, "__name__", "") == "__main__":
        return ""
    try:
        return inspect.getsource(module)
    except (OSError, TypeError):
        return ""
