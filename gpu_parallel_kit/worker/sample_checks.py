"""One sample of a plan search checked against the model before its step is counted.

Keras finds a sample that does not fit the model only inside the traced step, and says so in
its own words ("Invalid input shape for input JitTracer(...)", "Output with path `` is not
connected to `inputs`"). Here each mistake is one sentence naming the sample, the model's inputs
and the fix, worded for where the sample came from: `gpk.search(inputs=...)`, or an experiment's
`x`, whose sentences are the ones its runs give. Backend-free (Keras only).
"""

from __future__ import annotations

from typing import Any

import keras

from ..errors import GpkError
from ..runs.description.sources import CountedSample
from .input_names import check_input_names


def check_sample(model: keras.Model, sample: CountedSample) -> None:
    """The sample's inputs must be the model's: its names, as many arrays, each shaped as the
    model takes one sample; and a sparse loss needs the labels given. A model that declares no
    inputs (subclassed, built on first call) is left to Keras.

    Raises:
        GpkError: naming the sample's arrays, the model's inputs and the fix.
    """
    _check_inputs(model, sample)
    loss = getattr(model, "loss", None)
    if sample.labels is None and _takes_class_indices(loss):
        raise GpkError(
            f"the model's loss, {_loss_name(loss)}, takes class indices, not rows shaped like "
            "its output; pass one sample of the labels, e.g. labels=np.int32(0)"
        )


def _check_inputs(model: keras.Model, sample: CountedSample) -> None:
    declared = _declared(model)
    if not declared:
        return
    given = sample.inputs
    if isinstance(given, dict):
        names = [name for name, _ in declared]
        if not all(names):
            return  # Keras matches unnamed inputs by position: nothing to name here
        if sample.given_by == "data":
            check_input_names(model, given)  # the sentence `exp.run` gives
        elif not all(name in given for name in names):
            example = "{" + ", ".join(f"{name!r}: ..." for name in names) + "}"
            raise GpkError(
                f"inputs= is keyed {_listed(given)} but the model's inputs are named "
                f"{_listed(names)}; key the sample by the model's input names, e.g. "
                f"inputs={example}, or rename the model's inputs (keras.Input(..., name=...))"
            )
        pairs = [(f"[{name!r}]", want, given[name]) for name, want in declared]
    else:
        leaves = list(given) if isinstance(given, list) else [given]
        if len(leaves) != len(declared):
            raise GpkError(_count_sentence(sample, len(leaves), len(declared)))
        many = len(leaves) > 1
        pairs = [
            (f"[{i}]" if many else "", want, leaf)
            for i, ((_, want), leaf) in enumerate(zip(declared, leaves, strict=True))
        ]
    for where, want, (have, _) in pairs:
        if not _fits(want, tuple(have)):
            raise GpkError(_shape_sentence(sample, where, want, tuple(have)))


def _declared(model: keras.Model) -> list[tuple[str | None, tuple[int | None, ...]]]:
    """(name, shape per sample) of each input the model declares, in Keras's order; [] for a
    model that declares none."""
    try:
        specs = keras.tree.flatten(model.input_spec) if model.input_spec else []
    except (AttributeError, ValueError):
        specs = []
    if specs and all(getattr(spec, "shape", None) is not None for spec in specs):
        return [(getattr(spec, "name", None), tuple(spec.shape[1:])) for spec in specs]
    tensors = getattr(model, "inputs", None) if getattr(model, "built", False) else None
    return [(None, tuple(tensor.shape[1:])) for tensor in tensors or []]


def _fits(want: tuple[int | None, ...], have: tuple[int, ...]) -> bool:
    return len(want) == len(have) and all(
        w is None or w == h for w, h in zip(want, have, strict=True)
    )


def _shape_sentence(
    sample: CountedSample, where: str, want: tuple[int | None, ...], have: tuple[int, ...]
) -> str:
    if sample.given_by == "data":  # the sentence `exp.run` gives (worker/tensorflow/preflight.py)
        return (
            f"the model takes inputs of shape {_shape(want)} per sample but x{where} has samples "
            f"of shape {_shape(have)}; reshape x, or change the model's input shape "
            f"(keras.Input({_shape(have)}))"
        )
    named = f"inputs{where}" if where else "inputs="
    if _fits(want, have[1:]):
        return (
            f"{named} has shape {_shape(have)}, a batch of {have[0]}, but the model takes one "
            f"sample of shape {_shape(want)}; give one sample without the batch axis (x[0], "
            "not x)"
        )
    return (
        f"{named} has shape {_shape(have)} but the model takes samples of shape "
        f"{_shape(want)}; give one sample of that shape, or change the model's input shape "
        f"(keras.Input({_shape(have)}))"
    )


def _count_sentence(sample: CountedSample, given: int, declared: int) -> str:
    arrays = f"{given} array{'s' if given > 1 else ''}"
    if sample.given_by == "data":
        return (
            f"x holds {arrays} per sample but the model takes {declared} inputs; give x as one "
            "array per model input, in a list or keyed by input name"
        )
    return (
        f"inputs= holds {arrays} but the model takes {declared} inputs; give one array per "
        "model input, in a list or keyed by input name"
    )


def _takes_class_indices(loss: Any) -> bool:
    """Whether a single loss is a sparse one (class indices, not one-hot rows)."""
    return not isinstance(loss, dict | list | tuple) and "sparse" in _loss_name(loss).lower()


def _loss_name(loss: Any) -> str:
    name = loss if isinstance(loss, str) else getattr(loss, "name", None)
    return str(name or getattr(loss, "__name__", None) or type(loss).__name__)


def _listed(names: Any) -> str:
    return ", ".join(repr(str(name)) for name in names)


def _shape(dims: tuple[int | None, ...]) -> str:
    text = ", ".join("None" if d is None else str(d) for d in dims)
    return f"({text},)" if len(dims) == 1 else f"({text})"
