"""Published large-model training runs against the plan search's projection of the same plans.

    python benchmarks/published_runs.py [--recount] [--recount-long] [--markdown
                                         | --leave-one-out | --same-shape | --by-stack
                                         | --long-context]

With `--recount`, counts every published model by depth (`worker/jax/depth_scaling.py`: keras-hub's
`GPT2Backbone` with a tied language-model head, at one and two blocks of full width, one
sequence, `mixed_bfloat16`) and writes the cards to
`gpu_parallel_kit/planning/published_cards.json`; TensorFlow is kept out of the
process (keras-hub would import it). Then prints, for every run of
`planning/published_runs.py`, the reported throughput, the kit's projection of the same
plan in the paper's counting, their ratio, whether the plan fits, and the kit's best plan with
the step-time parts that make it faster. `--markdown` prints the table of
`docs/published-runs.md`; `--leave-one-out` prints the matmul efficiency's fit and each run
projected by the fit made without it (`planning/efficiency_fit.py`), as that page's tables;
`--same-shape` prints, for the runs whose matmuls have the same shapes, the one share of peak
that brings them closest to their published steps, and their ratios there; `--by-stack` prints
each software stack's fit (`analysis/cost_model/software_stack.py`) and every run, the H100
rows included, projected by its own stack fitted without it.

With `--recount-long`, counts the Llama 2 7B of NeMo's long-sequence table at each of its
sequences, 4K to 1M tokens (`depth_scaling.llama_card`: keras-hub's `LlamaBackbone`, counted
abstractly at one and two blocks), and writes the cards to
`gpu_parallel_kit/planning/published_long_cards.json`. `--long-context` prints that table's
rows with a context axis, each projected under its stack and under its stack fitted without
it, and each row without one against the kit's best plan without a context axis.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from gpu_parallel_kit.planning import published_runs


class _NoTensorFlow:
    def find_spec(self, name, path=None, target=None):
        if name == "tensorflow" or name.startswith("tensorflow."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def recount() -> None:
    """Count every published model by depth and store the cards."""
    sys.meta_path.insert(0, _NoTensorFlow())
    os.environ["KERAS_BACKEND"] = "jax"
    from gpu_parallel_kit.worker.jax.depth_scaling import DEPTHS, gpt_card

    cards, seconds = {}, {}
    for key in published_runs.card_keys():
        started = time.perf_counter()
        cards[key] = gpt_card(**published_runs.card_config(key))
        seconds[key] = round(time.perf_counter() - started, 1)
        print(f"counted {key} in {seconds[key]} s", flush=True)
    stored = {
        "counted": "keras-hub GPT2Backbone with a tied language-model head, one sequence, "
        f"mixed_bfloat16, forward and backward, counted at depths {DEPTHS} and extrapolated",
        "cards": cards,
        "count_s": seconds,
    }
    published_runs.CARDS.write_text(json.dumps(stored, indent=1) + "\n")
    published_runs.stored_cards.cache_clear()


def recount_long() -> None:
    """Count the Llama 2 7B of NeMo's long-sequence table at each of its sequences."""
    sys.meta_path.insert(0, _NoTensorFlow())
    os.environ["KERAS_BACKEND"] = "jax"
    from gpu_parallel_kit.worker.jax.depth_scaling import DEPTHS, llama_card

    cards, seconds = {}, {}
    for key, config in published_runs.long_card_configs().items():
        started = time.perf_counter()
        cards[key] = llama_card(**config)
        seconds[key] = round(time.perf_counter() - started, 1)
        print(f"counted {key} in {seconds[key]} s", flush=True)
    stored = {
        "counted": "keras-hub LlamaBackbone (SwiGLU MLP, rotary positions, RMS norms, no "
        "dropout) with its untied language-model head, one sequence, mixed_bfloat16, forward "
        f"and backward, counted abstractly at depths {DEPTHS} and extrapolated, at every "
        "sequence of the table (none derived from another)",
        "cards": cards,
        "count_s": seconds,
    }
    published_runs.LONG_CARDS.write_text(json.dumps(stored, indent=1) + "\n")
    published_runs.stored_long_cards.cache_clear()


def plan_text(row: dict) -> str:
    schedule = "" if row["schedule"] == "-" else f" {row['schedule']}"
    return (
        f"d{row['data']} t{row['tensor']} p{row['stages']} mb{row['micro_batch_size']}"
        f"{schedule} {row.get('recompute', row['checkpointing'])}"
        + ("" if row["sharding"] == "none" else f" {row['sharding']}")
    )


def print_table(rows: list[dict]) -> None:
    for row in rows:
        best = row["best"]
        print(
            f"{row['name']:42s} {plan_text(row):30s} published {row['published_tflops']:6.1f} "
            f"kit {row['kit_tflops_per_gpu']:6.1f} ratio {row['ratio']:.2f} "
            f"({row['ratio_low']:.2f}-{row['ratio_high']:.2f}) "
            f"{row['memory_gb']:5.1f} GB{'' if row['fits'] else ' (does not fit)'} "
            f"{row['bound']}"
        )
        if best:
            print(
                f"{'':42s} best: {plan_text(best):30s} {row['best_step_s']:.2f} s against "
                f"{row['kit_step_s']:.2f} s: {row['why']}"
            )
        else:
            print(f"{'':42s} best: none; {row['why']}")


def print_markdown(rows: list[dict]) -> None:
    print("| run | plan | published TFLOP/s | kit TFLOP/s | kit ÷ published (band) | memory GB "
          "| kit's best plan | its step against the run's |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        best = row["best"]
        fits = f"{row['memory_gb']:.0f}" + ("" if row["fits"] else " (over)")
        better = plan_text(best) if best else "none"
        why = f"{row['best_step_s']:.2f} s vs {row['kit_step_s']:.2f} s: " if best else ""
        print(
            f"| {row['name']} | {plan_text(row)} | {row['published_tflops']:.1f} "
            f"| {row['kit_tflops_per_gpu']:.1f} | {row['ratio']:.2f} "
            f"({row['ratio_low']:.2f}–{row['ratio_high']:.2f}) | {fits} | {better} "
            f"| {why}{row['why']} |"
        )


def print_leave_one_out() -> None:
    from gpu_parallel_kit.analysis.cost_model.matmul_efficiency import FITTED
    from gpu_parallel_kit.planning import efficiency_fit

    fitted = efficiency_fit.fitted()
    print(f"fitted now: {fitted!r}\nstored:     {FITTED!r}\n")
    print("| run | H (10⁻³) | implied share | fit without it | left out: kit ÷ published |")
    print("|---|---|---|---|---|")
    left_out = efficiency_fit.leave_one_out()
    for run, row in zip(published_runs.RUNS, left_out, strict=True):
        shape = efficiency_fit.point(run).inverse_size
        print(f"| {row.name} | {shape * 1e3:.3f} | {row.implied:.3f} | {row.share:.3f} "
              f"| {row.ratio:.2f} |")  # fmt: skip
    ratios = [row.ratio for row in left_out]
    print(f"left out, kit ÷ published: {min(ratios):.2f} to {max(ratios):.2f}")


def print_same_shapes() -> None:
    from gpu_parallel_kit.planning import efficiency_fit

    for group in efficiency_fit.same_shapes():
        print(f"H = {group.inverse_size * 1e3:.4f}·10⁻³, closest at one share of "
              f"{group.share:.3f}: ratios ×{min(group.ratios):.2f}–×{max(group.ratios):.2f} "
              f"(×{group.spread:.2f} apart)")  # fmt: skip
        for name, ratio in zip(group.names, group.ratios, strict=True):
            print(f"  {name}: {ratio:.2f}")


def print_by_stack() -> None:
    """Each software stack's fit, and each run projected by its stack fitted without it."""
    from gpu_parallel_kit.analysis.cost_model.software_stack import STACKS
    from gpu_parallel_kit.planning import efficiency_fit

    fitted = efficiency_fit.stacks()
    print("| stack | runs | released | GPU | bf16: peak share, edge, band | fp8: the same |")
    print("|---|---|---|---|---|---|")
    for name, stack in fitted.items():
        cells = []
        for precision in ("bf16", "fp8"):
            if not stack.fitted(precision):
                cells.append("–")
                continue
            m = stack.matmul_at(precision)
            cells.append(f"{m.peak_share:.3f}, {m.edge:.1f}, ×{m.low:.2f}–×{m.high:.2f}")
        stored = STACKS[name]
        same = all(
            stored.fitted(p) == stack.fitted(p)
            and (not stack.fitted(p) or abs(stored.matmul_at(p).peak_share
                                            - stack.matmul_at(p).peak_share) < 1e-3)
            for p in ("bf16", "fp8")
        )  # fmt: skip
        mark = "" if same else " (stored differs: re-fit)"
        print(f"| {name}{mark} | {stack.runs} | {stack.released} | {stack.device} "
              f"| {cells[0]} | {cells[1]} |")  # fmt: skip
    print()
    print("| run | stack | precision | implied share | its stack without it | "
          "kit ÷ published |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    runs = efficiency_fit.all_runs()
    left_out = efficiency_fit.leave_one_out_by_stack(runs)
    for run, row in zip(runs, left_out, strict=True):
        by = row.stack if row.stack == run.stack else f"{row.stack} (its own holds no other)"
        print(f"| {run.name} | {run.stack} | {run.precision} | {row.implied:.3f} | {by} "
              f"{row.share:.3f} | {row.ratio:.2f} |")  # fmt: skip
    ratios = [row.ratio for row in left_out]
    print(
        f"by stack, left out, kit ÷ published: {min(ratios):.2f} to {max(ratios):.2f} "
        f"over {len(ratios)} runs"
    )


def print_long_context() -> None:
    """NeMo's long-sequence table: each row with a context axis under its stack and under its
    stack fitted without it; each row without one against the kit's best plan without one."""
    from gpu_parallel_kit.planning import long_context

    print("| sequence | plan | published TFLOP/s | kit TFLOP/s | kit ÷ published "
          "| left out: kit TFLOP/s | left out: kit ÷ published | memory GB |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for row in long_context.with_context():
        fits = f"{row.memory_gb:.0f}" + ("" if row.fits else " (over)")
        print(f"| {row.sequence // 1024}K | {row.plan} | {row.published_tflops:g} "
              f"| {row.kit_tflops:.1f} | {row.ratio:.2f} | {row.left_out_tflops:.1f} "
              f"| {row.left_out_ratio:.2f} | {fits} |")  # fmt: skip
    print()
    print("| sequence | GPUs | published without CP | with CP | kit's best without a context "
          "axis | its TFLOP/s | kit ÷ published | memory GB |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for row in long_context.without_context():
        best = row.best or "none fits"
        print(f"| {row.sequence // 1024}K | {row.gpus:,} | {row.published_tflops:g} "
              f"| {row.with_context_tflops:g} | {best} | {row.kit_tflops:.1f} "
              f"| {row.ratio:.2f} | {row.memory_gb:.0f} |")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recount", action="store_true", help="count the models again")
    parser.add_argument(
        "--recount-long",
        action="store_true",
        help="count the Llama 2 7B of NeMo's long-sequence table at each sequence",
    )
    parser.add_argument("--markdown", action="store_true", help="print the docs' table")
    parser.add_argument(
        "--leave-one-out", action="store_true", help="print the efficiency's fit, run by run"
    )
    parser.add_argument(
        "--by-stack",
        action="store_true",
        help="print each software stack's fit and each run by its stack fitted without it",
    )
    parser.add_argument(
        "--long-context",
        action="store_true",
        help="print NeMo's long-sequence table against the kit, with a context axis and without",
    )
    parser.add_argument(
        "--same-shape",
        action="store_true",
        help="print how close one share of peak brings the runs of one shape",
    )
    args = parser.parse_args(argv)
    if args.recount:
        recount()
    if args.recount_long:
        recount_long()
    if args.leave_one_out:
        print_leave_one_out()
        return 0
    if args.same_shape:
        print_same_shapes()
        return 0
    if args.by_stack:
        print_by_stack()
        return 0
    if args.long_context:
        print_long_context()
        return 0
    rows = published_runs.runs_table()
    (print_markdown if args.markdown else print_table)(rows)
    ratios = [row["ratio"] for row in rows]
    print(f"kit ÷ published: {min(ratios):.2f} to {max(ratios):.2f} over {len(rows)} runs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
