"""The kit's one exception family.

Every mistake a user can make in a plan is reported as a `GpkError` (a `ValueError`) whose message
is one sentence naming the bad value and the fix, raised before any worker process starts, so that
front ends can show the sentence alone instead of a traceback.
"""


class GpkError(ValueError):
    """A plan, model, data or device choice the kit cannot run; the message says how to fix it."""


class BackendUnavailable(GpkError):
    """A backend installed but broken (a library missing, mismatched versions): its worker could
    not even list the devices. Raised at the first run or device listing, not at import, since
    the kit's caller never imports the backend itself; the message names the cause and the fix."""


def one_sentence(error: BaseException) -> str:
    """An error's message on one line, as the command line, the magic and the panel show it."""
    text = " ".join(str(error).split())
    return text or type(error).__name__


def whole_number(value: object, name: str, *, minimum: int | None = 1, hint: str = "") -> int:
    """`value` as a whole number of at least `minimum`, or one sentence naming it and the fix.

    A bool is refused although Python counts it an int: `devices=True` is a slip, not a count.
    A wrong type is a TypeError; a number below `minimum` (None: no lower bound) a GpkError.
    `hint` ends either sentence, e.g. "or None to let tune choose".

    >>> whole_number(4, "micro_batches")
    4
    >>> whole_number(0, "micro_batches")
    Traceback (most recent call last):
    ...
    gpu_parallel_kit.errors.GpkError: micro_batches=0 is too few; use micro_batches=1 or more
    """
    tail = f", {hint}" if hint else ""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(
            f"{name} must be an int, not {type(value).__name__} ({name}={value!r}){tail}"
        )
    if minimum is not None and value < minimum:
        raise GpkError(f"{name}={value} is too few; use {name}={minimum} or more{tail}")
    return value
