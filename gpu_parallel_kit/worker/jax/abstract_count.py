"""A training step counted without allocating the model's weights: FLOPs, bytes, parameters and
the activations backpropagation keeps, for models too large to build here.

The model is built under `keras.StatelessScope(initialize_variables=False)`, so its variables
keep a shape and a dtype but no value; the optimizer's slots are built the same way. Keras's
own train step (forward, loss, gradients and the optimizer update, what `fit` jits) is then
lowered and compiled on `jax.ShapeDtypeStruct`s, and `compiled.cost_analysis()` gives its FLOPs
and bytes. The activations come from the trace: the residuals `jax.vjp` keeps from the forward
for the backward (what `jax.ad_checkpoint.print_saved_residuals` lists), each named by the Keras
layer that made it. See `docs/planning.md`.
"""

from __future__ import annotations

import contextlib
import math
import re
import time
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from .work_count import _cost, _kernels

# The attention the trace holds: keras-hub's layers call Keras's `MultiHeadAttention` math (the
# scores, their softmax and its dropout, each an (a, s, s) tensor per sample) unless a flash
# kernel is enabled, which JAX on CPU never is.
ATTENTION = "unfused softmax(QK^T/sqrt(d))V, scores kept (no flash attention)"


# Operations XLA's fusion rebuilds from their operands for free: an activation one of them makes
# from other kept values is recomputed in the backward, not kept (see `_kept`).
_CHEAP_NAMES = (
    "abs add and broadcast_in_dim convert_element_type copy copy_p cos div eq erf exp "
    "expand_dims ge gt integer_pow le log log1p logistic lt max min mul ne neg not or pow "
    "reduce_precision reshape rsqrt select_n sign sin sqrt square squeeze sub tanh transpose "
    "stop_gradient"
)
CHEAP = frozenset(_CHEAP_NAMES.split())
NOT_MATERIALISED = frozenset({"broadcast_in_dim", "iota"})
NESTED = frozenset({"pjit", "jit", "closed_call", "core_call", "remat", "checkpoint"})


def count_abstract(
    build_model: Callable[[], Any],
    inputs: Any,
    batch: int,
    precision: str = "float32",
    targets: Any = None,
    optimizer: Any = "adam",
    loss: Any = "mean_squared_error",
) -> dict[str, Any]:
    """Count one training step of `build_model()` at `batch` without allocating its weights.

    Args:
        build_model: returns a Keras model, compiled or not. A model it compiles keeps its own
            optimizer and loss; one it leaves uncompiled is compiled with `optimizer` and `loss`.
        inputs: the model's inputs per sample: a `(shape, dtype)` tuple, or a dict or list of them.
        batch: the samples per step.
        precision: a Keras dtype policy ("float32", "mixed_bfloat16", "bfloat16", ...).
        targets: the targets per sample, as `inputs`; by default shaped like the model's output.
        optimizer: the optimizer of an uncompiled model; None leaves the update out of the step.
        loss: the loss of an uncompiled model.

    Returns:
        A dict: "flops" and "bytes" per step (XLA's cost analysis of the compiled step),
        "kernels" (its launching instructions, `work_count._kernels`),
        "parameters", "optimizer" (its class, None when left out), "activations" (see
        `activations`), "attention" (the one the trace holds), "lower_s", "compile_s".
    """
    import jax
    import keras

    if keras.backend.backend() != "jax":
        raise RuntimeError(f"Keras runs on {keras.backend.backend()!r} here, not on JAX")
    started = time.perf_counter()
    # One scope around everything: a nested scope that ends (a symbolic call, `stateless_call`)
    # then never initializes the deferred variables, which only the outermost scope would.
    with _policy(precision), keras.StatelessScope(initialize_variables=False) as scope:
        with _small_state_outside(scope):
            model = build_model()
        updated = model.compiled or optimizer is not None
        if not model.compiled:
            with _outside(scope):
                model.compile(optimizer=optimizer or "sgd", loss=loss)
        model.optimizer.build(model.trainable_variables)
        x = _specs(inputs, batch)
        y = _specs(targets, batch) if targets is not None else _output_specs(model, x)
        state = (
            _shapes(model.trainable_variables),
            _shapes(model.non_trainable_variables),
            _shapes(model.optimizer.variables),
            _shapes(model.metrics_variables),
        )
        # Without the update: forward, loss and gradients.
        grad = jax.value_and_grad(model.compute_loss_and_updates, has_aux=True)
        step = (
            model.train_step
            if updated
            else lambda w, d: grad(w[0], w[1], w[3], *d, None, True, w[2])
        )

        lowered = jax.jit(step).lower(state, (x, y))
        lowered_s = time.perf_counter() - started
        compiled = lowered.compile()
        compile_s = time.perf_counter() - started - lowered_s
        cost = {**_cost(compiled), "kernels": _kernels(compiled)}

        def forward(trainable: Any, rest: Any) -> Any:
            frozen, metrics, optimizer_vars, x, y = rest
            args = (frozen, metrics, x, y, None, True, optimizer_vars)
            return model.compute_loss_and_updates(trainable, *args)[0]

        sequence = next((v.shape[1] for v in jax.tree.leaves(x) if v.ndim >= 2), None)
        kept = activations(forward, state[0], (state[1], state[3], state[2], x, y), sequence)
    return {
        **cost,
        "parameters": int(sum(math.prod(v.shape) for v in model.trainable_variables)),
        "optimizer": type(model.optimizer).__name__ if updated else None,
        "precision": precision,
        "batch": batch,
        "activations": kept,
        "attention": ATTENTION,
        "lower_s": lowered_s,
        "compile_s": compile_s,
    }


def activations(
    loss: Callable[[Any, Any], Any], weights: Any, rest: Any, sequence: int | None = None
) -> dict[str, Any]:
    """What backpropagation of `loss(weights, rest)` keeps from its forward, from the trace.

    Every residual of `jax.vjp(lambda w: loss(w, rest), weights)` is read with the operation
    and the Keras layer that made it. Residuals that are inputs, copies of the weights (they do
    not depend on `rest`) or broadcasts (never materialised) are no activations. Of the others,
    "saved" totals all; "kept" leaves out those XLA's fusion rebuilds for free in the backward
    (an elementwise operation of other kept values that no matmul reads: the softmax beside its
    exponentials, the tanh inside a GeLU), which is how Megatron-LM's count of a layer reads.

    Args:
        loss: `loss(weights, rest)`, a scalar.
        weights: what the gradients are taken of (shape structs or arrays).
        rest: the batch and every other state (shape structs or arrays).
        sequence: the sequence length, to name (s, s) tensors "scores".

    Returns:
        A dict: "saved_bytes", "kept_bytes", "scores_bytes" (the kept (s, s) tensors: an
        attention's scores, softmax and dropout mask, whatever computes them), "by_kind" (kind
        -> kept bytes, a kind being the
        layer's name without its index, then "mask" for booleans, "scores" for (s, s) tensors),
        "by_layer" (the first numbered layer, a backbone's block -> kept bytes), "by_path"
        (the layer's whole path, each name without its index -> kept bytes), "residuals"
        (one dict per residual: layer, op, shape, dtype, bytes, role "kept", "recomputed",
        "input", "weights" or "broadcast").
    """
    import jax

    closed, shapes = jax.make_jaxpr(
        lambda w, r: jax.vjp(lambda v: loss(v, r), w), return_shape=True
    )(weights, rest)
    graph = _Graph(closed.jaxpr)
    weight_count = len(jax.tree.leaves(weights))
    graph.mark_data(graph.inputs[weight_count:])
    count = len(jax.tree.leaves(shapes[1]))
    rows = []
    for var in dict.fromkeys(v for v in graph.outputs[-count:] if v is not None):
        node, aval = graph.producer.get(var), var.aval
        op, layer = (node.op, node.layer) if node else ("argument", "")
        role = _role(node is None, graph.data.get(var, False), op)
        rows.append(
            {
                "var": var,
                "layer": layer,
                "op": op,
                "shape": tuple(aval.shape),
                "dtype": str(aval.dtype),
                "bytes": int(math.prod(aval.shape)) * aval.dtype.itemsize,
                "role": role,
                "kind": _kind(layer, aval, sequence),
            }
        )
    _kept(graph, rows)
    kept = [r for r in rows if r["role"] == "kept"]
    by_kind: dict[str, int] = {}
    by_layer: dict[str, int] = {}
    by_path: dict[str, int] = {}
    for row in kept:
        by_kind[row["kind"]] = by_kind.get(row["kind"], 0) + row["bytes"]
        path = layer_path(row["layer"])
        by_path[path] = by_path.get(path, 0) + row["bytes"]
        top = _top_layer(row["layer"])
        by_layer[top] = by_layer.get(top, 0) + row["bytes"]
    for row in rows:
        del row["var"]
    square = [r for r in kept if sequence and r["shape"][-2:] == (sequence, sequence)]
    return {
        "saved_bytes": sum(r["bytes"] for r in rows if r["role"] in ("kept", "recomputed")),
        "kept_bytes": sum(r["bytes"] for r in kept),
        "scores_bytes": sum(r["bytes"] for r in square),
        "by_kind": dict(sorted(by_kind.items(), key=lambda kv: -kv[1])),
        "by_layer": by_layer,
        "by_path": by_path,
        "residuals": rows,
    }


class _Node(NamedTuple):
    index: int
    op: str
    layer: str
    operands: list
    outputs: list


class _Value:  # a variable of one call: a nested jaxpr traced once may be called many times
    __slots__ = ("aval",)

    def __init__(self, aval: Any) -> None:
        self.aval = aval


class _Graph:
    """A jaxpr with its nested jit calls inlined: each value's producing operation, its layer
    (the name stack Keras's layers push) and whether it depends on the batch."""

    def __init__(self, jaxpr: Any) -> None:
        self.producer: dict[_Value, _Node] = {}
        self.users: set[_Value] = set()  # values some matmul reads
        self.order: list[_Node] = []
        self.data: dict[_Value, bool] = {}
        self.inputs = [_Value(v.aval) for v in jaxpr.invars]
        self.outputs = self._walk(jaxpr, dict(zip(jaxpr.invars, self.inputs, strict=True)), "")

    def _walk(self, jaxpr: Any, env: dict[Any, _Value], prefix: str) -> list[_Value | None]:
        def read(atom: Any) -> _Value | None:
            return env.get(atom) if _is_var(atom) else None

        for eqn in jaxpr.eqns:
            name = eqn.primitive.name
            stack = str(eqn.source_info.name_stack)
            layer = f"{prefix}/{stack}".strip("/") if prefix else stack
            operands = [read(a) for a in eqn.invars]
            inner = eqn.params.get("jaxpr") if name in NESTED else None
            if inner is not None:  # inlined, its values this call's own
                inner = getattr(inner, "jaxpr", inner)
                pairs = zip(inner.invars, operands, strict=True)
                called = {v: x for v, x in pairs if x is not None}
                returned = zip(eqn.outvars, self._walk(inner, called, layer), strict=True)
                env.update({var: value for var, value in returned if value is not None})
                continue
            outputs = [_Value(v.aval) for v in eqn.outvars]
            env.update(zip(eqn.outvars, outputs, strict=True))
            known = [x for x in operands if x is not None]
            node = _Node(len(self.order), name, _clean(layer), known, outputs)
            self.order.append(node)
            self.producer.update(dict.fromkeys(outputs, node))
            if name == "dot_general":
                self.users.update(known)
        return [read(a) for a in jaxpr.outvars]

    def mark_data(self, invars: list[Any]) -> None:
        self.data.update(dict.fromkeys(invars, True))
        for node in self.order:
            if any(self.data.get(v, False) for v in node.operands):
                self.data.update(dict.fromkeys(node.outputs, True))

    def cheaply_from(self, var: Any, kept: set[Any], seen: dict[Any, bool], depth: int = 0) -> bool:
        """Whether `var` is rebuilt by cheap operations from kept values, inputs or weights."""
        if var in kept or not self.data.get(var, False) or var not in self.producer:
            return True
        if var in seen:
            return seen[var]
        node = self.producer[var]
        able = (
            depth < 32
            and node.op in CHEAP
            and all(self.cheaply_from(v, kept, seen, depth + 1) for v in node.operands)
        )
        seen[var] = able
        return able


def _kept(graph: _Graph, rows: list[dict[str, Any]]) -> None:
    """Mark each saved residual "kept" or "recomputed", the latest first: one that a cheap
    operation makes from the values still kept, and that no matmul reads, is recomputed."""
    saved = [r for r in rows if r["role"] == "saved"]
    kept = {r["var"] for r in saved}
    for row in sorted(saved, key=lambda r: -graph.producer[r["var"]].index):
        var = row["var"]
        node = graph.producer[var]
        others = kept - {var}
        recomputable = (
            node.op in CHEAP
            and var not in graph.users
            and all(graph.cheaply_from(v, others, {}) for v in node.operands)
        )
        row["role"] = "recomputed" if recomputable else "kept"
        kept -= {var} if recomputable else set()


def _is_var(atom: Any) -> bool:
    return type(atom).__name__ != "Literal"


def _clean(stack: str) -> str:
    """A name stack as a layer path: without JAX's transformation wrappers ("jvp(...)")."""
    parts = [re.sub(r"^\w+\((.*)\)$", r"\1", p) for p in stack.split("/") if p]
    return "/".join(parts)


def _top_layer(layer: str) -> str:
    """The first numbered layer on the path (a block: "transformer_layer_3"), else the first."""
    parts = [p for p in layer.split("/") if p]
    numbered = [p for p in parts if re.search(r"_\d+$", p)]
    return numbered[0] if numbered else (parts[0] if parts else "(model)")


def layer_path(layer: str) -> str:
    """A residual's layer path as its blocks share it: the trace's jit frames left out, each
    name without its index ("transformer_layer_1/moe_block_1/experts" →
    "transformer_layer/moe_block/experts")."""
    inner = [p for p in layer.split("/") if p and not p.startswith(("jit(", "pjit("))]
    return "/".join(re.sub(r"_\d+$", "", p) for p in inner)


def _kind(layer: str, aval: Any, sequence: int | None) -> str:
    inner = [p for p in layer.split("/") if p and not p.startswith(("jit(", "pjit("))]
    names = [re.sub(r"_\d+$", "", p) for p in inner]
    name = names[-1] if names else "(model)"
    if name in ("softmax", "dropout") and len(names) > 1:  # which softmax, which dropout
        name = f"{names[-2]}/{name}"
    if str(aval.dtype) == "bool":
        name += " mask"
    elif sequence and len(aval.shape) >= 2 and tuple(aval.shape[-2:]) == (sequence, sequence):
        name += " scores"
    return name


def _specs(spec: Any, batch: int) -> Any:
    """`(shape, dtype)` pairs per sample, in a dict or a list, as structs of a batch."""
    import jax

    if isinstance(spec, dict):
        return {k: _specs(v, batch) for k, v in spec.items()}
    if isinstance(spec, list):
        return [_specs(v, batch) for v in spec]
    shape, dtype = spec
    return jax.ShapeDtypeStruct((batch, *shape), dtype)


def _output_specs(model: Any, x: Any) -> Any:
    import jax

    trainable = _shapes(model.trainable_variables)
    frozen = _shapes(model.non_trainable_variables)
    out = jax.eval_shape(lambda t, f, x: model.stateless_call(t, f, x)[0], trainable, frozen, x)
    return jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, "float32"), out)


def _shapes(variables: Any) -> list[Any]:
    import jax

    return [jax.ShapeDtypeStruct(tuple(v.shape), v.dtype) for v in variables]


@contextlib.contextmanager
def _policy(precision: str) -> Iterator[None]:
    import keras

    before = keras.config.dtype_policy()
    keras.config.set_dtype_policy(precision)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(before)


_OUTSIDE: dict[int, int] = {}  # how deep each deferring scope has been stepped out of


@contextlib.contextmanager
def _outside(scope: Any) -> Iterator[None]:
    """Out of the deferring scope for a while: what is created here is allocated. Reentrant:
    a `compile` that makes an optimizer leaves the scope once, so the scope, entered again,
    restores what was before it when it ends (entered twice, it would restore itself, and
    every model built after the count in the same process would be deferred)."""
    depth = _OUTSIDE.get(id(scope), 0)
    _OUTSIDE[id(scope)] = depth + 1
    if depth == 0:
        scope.__exit__(None, None, None)
    try:
        yield
    finally:
        if depth == 0:
            del _OUTSIDE[id(scope)]
            scope.__enter__()
        else:
            _OUTSIDE[id(scope)] = depth


@contextlib.contextmanager
def _small_state_outside(scope: Any) -> Iterator[None]:
    """While a builder runs: an optimizer it makes and a `compile` it calls run outside the
    scope, which refuses variables given a value rather than an initializer (an optimizer's
    step counter). Their slots are built later, deferred like the weights."""
    import keras

    optimizer_init = keras.optimizers.Optimizer.__init__
    compile_model = keras.Model.compile

    def make_optimizer(self: Any, *args: Any, **kwargs: Any) -> None:
        with _outside(scope):
            optimizer_init(self, *args, **kwargs)

    def compile_outside(self: Any, *args: Any, **kwargs: Any) -> None:
        with _outside(scope):
            compile_model(self, *args, **kwargs)

    keras.optimizers.Optimizer.__init__ = make_optimizer
    keras.Model.compile = compile_outside
    try:
        yield
    finally:
        keras.optimizers.Optimizer.__init__ = optimizer_init
        keras.Model.compile = compile_model


def _role(argument: bool, data: bool, op: str) -> str:
    """What a kept value is: an input of the step, a copy of the weights, a broadcast never
    materialised, or an activation saved for the backward."""
    if argument:
        return "input"
    if not data:
        return "weights"
    if op in NOT_MATERIALISED:
        return "broadcast"
    return "saved"
