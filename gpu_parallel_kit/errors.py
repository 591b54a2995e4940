"""The kit's one exception family.

Every mistake a user can make in a plan is reported as a `GpkError` (a `ValueError`) whose message
is one sentence naming the bad value and the fix, raised before any worker process starts, so that
front ends can show the sentence alone instead of a traceback.
"""


class GpkError(ValueError):
    """A plan, model, data or device choice the kit cannot run; the message says how to fix it."""


def one_sentence(error: BaseException) -> str:
    """An error's message on one line, as the command line, the magic and the panel show it."""
    text = " ".join(str(error).split())
    return text or type(error).__name__
