"""The layer graph on literal graphs: orders, what crosses each cut, and where cuts go."""

from __future__ import annotations

import pytest

from gpu_parallel_kit.errors import GpkError
from gpu_parallel_kit.pipeline.graph import Call, LayerGraph, cut_positions, positions_from_names


def chain(n: int) -> LayerGraph:
    calls = [Call(f"l{i}", (f"t{i}",), (f"t{i + 1}",)) for i in range(n)]
    return LayerGraph.ordered(calls, ("t0",), (f"t{n}",))


def residual() -> LayerGraph:
    """x -> d1 -> h; h -> d2 -> r; add(h, r) -> s; s -> out."""
    return LayerGraph.ordered(
        [
            Call("d1", ("x",), ("h",)),
            Call("d2", ("h",), ("r",)),
            Call("add", ("h", "r"), ("s",)),
            Call("out", ("s",), ("y",)),
        ],
        ("x",),
        ("y",),
    )


def unet() -> LayerGraph:
    """down1 -> down2 -> up2 -> concat(down1) -> up1: down1's output is a long skip."""
    return LayerGraph.ordered(
        [
            Call("down1", ("x",), ("a",)),
            Call("down2", ("a",), ("b",)),
            Call("mid", ("b",), ("c",)),
            Call("up2", ("c",), ("d",)),
            Call("concat", ("d", "a"), ("e",)),
            Call("up1", ("e",), ("y",)),
        ],
        ("x",),
        ("y",),
    )


def test_a_chain_sends_one_tensor_over_every_cut():
    graph = chain(4)
    assert [graph.crossing(p) for p in range(5)] == [("t0",), ("t1",), ("t2",), ("t3",), ("t4",)]


def test_a_residual_block_sends_its_stream_and_the_branch():
    graph = residual()
    assert graph.crossing(1) == ("h",)
    assert graph.crossing(2) == ("h", "r")
    assert graph.crossing(3) == ("s",)


def test_a_long_skip_rides_through_the_stages_between_its_ends():
    graph = unet()
    assert graph.crossing(2) == ("a", "b")
    assert graph.crossing(3) == ("a", "c")
    middle = graph.stage(2, 4)  # mid, up2
    assert middle.used == ("b",) and middle.passed_through == ("a",)
    assert middle.computed == ("d",) and middle.sent == ("a", "d")


def test_the_order_is_topological_and_keeps_the_given_order_where_it_can():
    calls = [
        Call("late", ("x", "b"), ("y",)),
        Call("a", ("x",), ("a",)),
        Call("b", ("a",), ("b",)),
    ]
    graph = LayerGraph.ordered(calls, ("x",), ("y",))
    assert [c.name for c in graph.calls] == ["a", "b", "late"]
    assert graph.crossing(2) == ("x", "b")  # the model input joins late: it rides along


def test_a_tensor_nothing_makes_is_one_sentence():
    with pytest.raises(GpkError, match="layer 'd' reads 'ghost'"):
        LayerGraph.ordered([Call("d", ("ghost",), ("y",))], ("x",), ("y",))


def test_cuts_balance_first_then_avoid_wide_crossings():
    # Four equal layers: 2 + 2 is the only balanced split into two.
    assert cut_positions([1, 1, 1, 1], [0, 1, 100, 1], 2) == [2]
    # Within 10 % of the best balance, the narrower cut wins.
    assert cut_positions([10, 10, 1, 10, 10], [0, 1, 50, 1, 1], 2) == [3]
    assert cut_positions([10, 10, 1, 10, 10], [0, 1, 1, 50, 1], 2) == [2]


def test_cuts_for_several_stages_cover_every_call():
    positions = cut_positions([1] * 8, [0] + [1] * 7, 4)
    assert positions == [2, 4, 6]


def test_stages_begin_at_named_layers():
    assert positions_from_names(unet(), ["mid", "concat"], 3) == [2, 4]
    with pytest.raises(GpkError, match="does not have"):
        positions_from_names(unet(), ["nope"], 2)
    with pytest.raises(GpkError, match="need 2"):
        positions_from_names(unet(), ["mid"], 3)
    with pytest.raises(GpkError, match="in the model's order"):
        positions_from_names(unet(), ["concat", "mid"], 3)
