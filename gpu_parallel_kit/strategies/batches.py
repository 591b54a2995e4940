"""The one rule every replica-splitting strategy shares: the global batch splits evenly."""

from __future__ import annotations

from ..errors import GpkError


def check_batch(global_batch: int, devices: int) -> None:
    """A global batch must split evenly over the replicas: each gets the same share."""
    if global_batch % devices == 0:
        return
    lower = global_batch - global_batch % devices
    upper = lower + devices
    nearest = f"{lower} or {upper}" if lower > 0 else f"{upper}"
    raise GpkError(
        f"batch_size={global_batch} is not divisible by {devices} devices; "
        f"use a multiple of {devices}, e.g. {nearest}"
    )
