"""The kit's one whole-number check: what it accepts, and the sentence for what it refuses."""

import pytest

from gpu_parallel_kit.errors import GpkError, whole_number


def test_a_whole_number_at_or_above_the_minimum_comes_back():
    assert whole_number(3, "devices") == 3
    assert whole_number(0, "warmup_steps", minimum=0) == 0
    assert whole_number(-5, "offset", minimum=None) == -5


@pytest.mark.parametrize("value", [True, False, 2.0, "2", None])
def test_a_bool_or_non_int_is_a_type_error_naming_the_value(value):
    with pytest.raises(TypeError, match=rf"^devices must be an int, not {type(value).__name__}"):
        whole_number(value, "devices")


def test_below_the_minimum_is_one_sentence_with_the_fix():
    with pytest.raises(GpkError, match=r"^stages=0 is too few; use stages=1 or more$"):
        whole_number(0, "stages")
    with pytest.raises(GpkError, match=r"^workers=1 is too few; use workers=2 or more, e\.g\. 2$"):
        whole_number(1, "workers", minimum=2, hint="e.g. 2")
    assert not isinstance(GpkError(), TypeError)
