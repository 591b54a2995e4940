"""The plan search's options of `gpk search` and `%gpk search`, written once: the cluster and
the software it runs, the batch, the precision, one sample's input shapes and the structure a
model may not say.

Both front ends build their parsers from these rows and call `gpk.search` with `keywords`.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from ..analysis.cost_model.device_calibration import DeviceCalibration
from ..analysis.cost_model.gpu_cluster import GPUCluster
from ..analysis.cost_model.hardware_presets import DEVICES, INTERCONNECTS
from ..analysis.cost_model.model_card import ATTENTIONS
from ..analysis.cost_model.software_stack import STACKS
from ..analysis.cost_model.training_precision import PRECISIONS, training_precision
from ..api import Experiment
from ..comparison import Comparison
from ..errors import GpkError
from ..strategies import BACKENDS
from .argtypes import positive
from .flag import Flag
from .table import BATCH_SIZE


def _searched(flag: str, text: str, *, default: Any = None, **details: Any) -> Flag:
    """A flag of `gpk search` and `%gpk search`: a keyword of `gpk.search`, None by default."""
    return Flag(flag, text, goes_to="search", default=default, **details)


SEARCH: tuple[Flag, ...] = (
    _searched(
        "--inputs",
        "one sample of the model's inputs, as NAME=SHAPE[:DTYPE] items (token_ids=2048:int32 "
        "padding_mask=2048:int32) or one SHAPE[:DTYPE] (32x32x3); DTYPE defaults to float32",
        nargs="+",
        metavar="INPUT",
    ),
    _searched(
        "--device",
        "the GPU: a100, h100 or h200, or a calibration gpk.calibrate() kept (its .json file); "
        "default: %(default)s",
        default="h100",
    ),
    _searched("--nodes", "nodes; default: %(default)s", type=positive, default=1),
    _searched("--per-node", "GPUs per node; default: %(default)s", type=positive, default=8),
    _searched(
        "--inside",
        "the link inside a node (nvlink3, nvlink4, pcie4, ...); default: the GPU's usual NVLink",
    ),
    _searched(
        "--between",
        "the network between nodes (net100g, net200g, net400g); default: %(default)s",
        default="net400g",
    ),
    _searched(
        "--global-batch", "samples per step over the whole cluster", type=positive, metavar="B"
    ),
    _searched(
        "--stack",
        "the training software the steps are timed under, fitted on its published runs "
        f"({', '.join(STACKS)}); default: the newest, or a calibration's own",
        choices=tuple(STACKS),
    ),
    _searched(
        "--precision",
        "bf16, fp16, mixed, fp32 or fp8 (its matmuls at the FP8 peak); default: %(default)s",
        choices=PRECISIONS,
        default="bf16",
    ),
    _searched(
        "--optimizer", "adam, adamw, sgd, momentum, ...; default: %(default)s", default="adam"
    ),
    _searched("--blocks", "the model's repeated blocks, where it does not say them", type=positive),
    _searched("--hidden", "the model's width, where it does not say it", type=positive),
    _searched("--heads", "attention heads, where the model does not say them", type=positive),
    _searched(
        "--attention",
        "flash (a fused kernel: no attention scores kept) or as-written; default: flash where "
        "the GPU has a fused kernel",
        choices=ATTENTIONS,
    ),
    _searched("--top", "plans shown; default: %(default)s", type=positive, default=5),
)
# The leading plans run here after the search, as the panel's plan tab runs them: its "run here"
# and "compare the top 3 here". Each front end adds `--data` in its own form (a notebook's names,
# a file or a built-in set).
HERE: tuple[Flag, ...] = (
    Flag(
        "--run-here",
        "after the search, run the plan of this rank (1: the best) here, its shape scaled down "
        "to this machine's devices (Experiment.run_plan); needs --data",
        goes_to="front end",
        type=positive,
        metavar="RANK",
        default=None,
    ),
    Flag(
        "--compare-here",
        "after the search, run the N leading plans here, one after another "
        "(Experiment.compare_plans); needs --data",
        goes_to="front end",
        type=positive,
        metavar="N",
        default=None,
    ),
    Flag(
        "--devices-here",
        "the devices here a plan run may take; default: every device this machine offers",
        goes_to="front end",
        type=positive,
        metavar="N",
        default=None,
    ),
    Flag(
        "--batch-size",
        "the global batch of the runs here, each plan's batch scaled down to it; default: "
        "%(default)s",
        goes_to="front end",
        type=positive,
        metavar="N",
        default=BATCH_SIZE.api_default,
    ),
    Flag(
        "--backend",
        "the backend of the runs here (a plan's strategy it lacks runs on one that has it); "
        "default: %(default)s",
        goes_to="front end",
        choices=BACKENDS,
        api_call=Experiment.__init__,
    ),
)
_STRUCTURE = ("blocks", "hidden", "heads")
GPU_PRESETS = tuple(DEVICES)  # what --device names, beside a calibration's file
LINKS = tuple(INTERCONNECTS)  # what --inside and --between name
# --precision's records, each once (float32 and fp32 are one): the list a panel offers.
PRECISION_NAMES = tuple(dict.fromkeys(training_precision(p).name for p in PRECISIONS))
CALIBRATION_FILE = ".json"
_ITEM = re.compile(r"^(?:(?P<name>[A-Za-z_][\w]*)=)?(?P<shape>\d+(?:x\d+)*)(?::(?P<dtype>\w+))?$")


def sample_from_text(items: list[str] | None) -> Any:
    """One sample's `(shape, dtype)` pairs from `--inputs` items: a dict when they are named,
    else one pair (or a list of pairs)."""
    if not items:
        raise GpkError(
            "--inputs is missing; give one sample's shape, e.g. --inputs "
            "token_ids=2048:int32 padding_mask=2048:int32, or --inputs 32x32x3"
        )
    pairs = []
    for item in items:
        found = _ITEM.match(item)
        if found is None:
            raise GpkError(
                f"--inputs item {item!r} is not NAME=SHAPE[:DTYPE]; write e.g. "
                "token_ids=2048:int32 or 32x32x3"
            )
        shape = tuple(int(d) for d in found["shape"].split("x"))
        pairs.append((found["name"], (shape, found["dtype"] or "float32")))
    names = [name for name, _ in pairs]
    if all(names):
        return dict(pairs)
    if any(names):
        raise GpkError("--inputs items are named and unnamed at once; name all of them or none")
    return pairs[0][1] if len(pairs) == 1 else [pair for _, pair in pairs]


def keywords(parsed: argparse.Namespace) -> dict[str, Any]:
    """`gpk.search`'s keywords but `model` and `inputs`, from a parsed command line."""
    if parsed.global_batch is None:
        raise GpkError("--global-batch is missing; give the samples per step, e.g. 512")
    cluster = GPUCluster(
        device=device_of(parsed.device),
        nodes=parsed.nodes,
        per_node=parsed.per_node,
        inside=parsed.inside,
        between=parsed.between,
        stack=parsed.stack,
    )
    given = {k: getattr(parsed, k) for k in _STRUCTURE if getattr(parsed, k) is not None}
    return {
        "gpus": cluster,
        "global_batch": parsed.global_batch,
        "precision": parsed.precision,
        "optimizer": parsed.optimizer,
        "attention": parsed.attention,
        **given,
    }


def device_of(text: str) -> Any:
    """`--device`'s GPU: a preset's name as `GPUCluster` takes it, or the calibration a
    `.json` file holds."""
    if str(text).endswith(CALIBRATION_FILE):
        return DeviceCalibration.load(text)
    return text


def defaults(**given: Any) -> argparse.Namespace:
    """The search's options as a parsed command line with no flag given, then `given`: how the
    panel's plan tab hands its values to `keywords`, as `%gpk search` does its flags."""
    values = {flag.name: flag.resolved_default for flag in SEARCH}
    unknown = set(given) - set(values)
    if unknown:
        raise GpkError(f"the search takes no option {', '.join(sorted(unknown))}")
    return argparse.Namespace(**{**values, **given})


def runs_here(parsed: argparse.Namespace) -> bool:
    """Whether a parsed command line asks to run plans here after the search; one sentence when
    it asks both ways at once."""
    if parsed.run_here is not None and parsed.compare_here is not None:
        raise GpkError("give --run-here RANK or --compare-here N, not both")
    return parsed.run_here is not None or parsed.compare_here is not None


def experiment_here(model: Any, data: Any, parsed: argparse.Namespace) -> Experiment:
    """The Experiment the runs here train in: the searched model on `data` (None: a built-in
    model's own set), at `--batch-size`, on `--backend`."""
    return Experiment(model=model, data=data, batch_size=parsed.batch_size, backend=parsed.backend)


def ran_here(plans: Any, experiment: Experiment, parsed: argparse.Namespace) -> Comparison:
    """The leading plans run here as a parsed command line asks: the one of rank `--run-here`
    (`Experiment.run_plan`), or the `--compare-here` first (`Experiment.compare_plans`)."""
    asked = parsed.run_here or parsed.compare_here
    leading = plans.top(asked)
    if parsed.run_here is not None:
        if parsed.run_here > len(leading):
            raise GpkError(
                f"--run-here {parsed.run_here} names no plan: {len(leading)} fit; give a rank "
                f"from 1 to {len(leading)}"
            )
        plan = leading.iloc[parsed.run_here - 1]
        return experiment.run_plan(plan, devices=parsed.devices_here)
    return experiment.compare_plans(leading, devices=parsed.devices_here)
