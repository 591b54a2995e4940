"""What the plan search's tests share: a GPT-style card and a stand-in for the counting child."""

from __future__ import annotations

import pytest

from gpu_parallel_kit.analysis.cost_model.model_card import ModelCard

S, H, A, L = 2048, 4096, 32, 32  # a 6.7 B-parameter GPT


def gpt_card(precision: str = "bf16") -> ModelCard:
    """Korthikanti's activations per block at the precision's width: 34·s·h + 5·a·s² at 16 bits."""
    width = 4 if precision == "fp32" else 2
    return ModelCard(
        parameters=12 * H * H * L,
        layers=L,
        hidden=H,
        heads=A,
        sequence=S,
        flops_per_sample=72 * S * L * H * H * (1 + S / (6 * H)),
        activation_bytes=S * H * 17 * width + (2 * width + 1) * A * S * S,
        precision=precision,
    )


# What `worker/jax/plan_count.py` answers for a 4-block GPT-2 of width 64 at sequence 32.
COUNT = {
    "flops": 4.7e7,
    "parameters": 218_496,
    "kept_bytes": 1.2e6,
    "by_layer": {f"transformer_layer_{i}": 180_000 + i for i in range(4)} | {"embeddings": 9e4},
    "structure": {
        "blocks": 4,
        "hidden": 64,
        "heads": 4,
        "block_names": [f"transformer_layer_{i}" for i in range(4)],
        "found_in": "GPT2Backbone",
    },
}


@pytest.fixture
def counted(monkeypatch, tmp_path):
    """The counting child replaced by `COUNT`; the calls it got, in a list."""
    from gpu_parallel_kit.planning import step_count

    calls = []

    def count(source, sample, policy, optimizer, progress, cancel=None):
        calls.append((source.name, sample, policy, optimizer))
        return dict(COUNT)

    monkeypatch.setenv("GPK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(step_count, "_count_in_child", count)
    monkeypatch.setattr(step_count, "_counted", {})
    return calls
