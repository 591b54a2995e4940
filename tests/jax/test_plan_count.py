"""The plan search's counting child (`worker/jax/plan_count.py`) writes nothing but real
warnings to the notebook's stderr: TensorFlow's start-up chatter, which keras-hub's import of
TensorFlow writes, is held back."""

from __future__ import annotations

import os

from gpu_parallel_kit.worker.jax import plan_count

CHATTER = (
    b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
)


def test_the_count_keeps_tensorflows_start_up_chatter_out_of_stderr(monkeypatch, capfd):
    said = []

    def answer(sender, count):  # the count, as keras-hub's import of TensorFlow leaves it
        os.write(2, CHATTER)
        os.write(2, b"a warning of the user's own\n")
        said.append(sender)

    monkeypatch.setattr(plan_count, "answer", answer)
    plan_count.count_for_plans(None, {}, "float32", None, "sender")
    err = capfd.readouterr().err
    assert said == ["sender"]
    assert "absl::InitializeLog" not in err and "a warning of the user's own" in err
