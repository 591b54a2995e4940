"""What the kit knows about one backend, as one frozen record.

Every room asks the record (`backends.backend(name)`) instead of comparing names. Entry points
and servers are named by import path ("module:function"), so this room, which sits at the bottom
of the kit, imports neither TensorFlow, JAX nor the worker.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Backend:
    """One backend: how its runs start, what it can run, and how tables and figures show it."""

    name: str  # the name a user types, a run's `backend` and the run log hold
    display: str  # its name in sentences: "TensorFlow"
    package: str  # the package whose presence says it is installed
    summary: str = ""  # what trains on it, for help texts and the demo: "TensorFlow, tf.distribute"
    default: bool = False  # runs take it unless told; tables and figures leave it unsaid
    # "module:function" entry points its worker process starts at
    run_entry: str = ""  # one run
    discovery_entry: str = ""  # lists this machine's devices as the backend sees them
    cluster_entry: str | None = None  # launches a run of several processes; None: it has none
    member_entry: str | None = None  # one worker process of such a run
    served_entry: str | None = None  # one worker process on a named cluster's host (`gpk worker`)
    step_entry: str | None = None  # one task of a Slurm job step, joining by Slurm's variables
    # the calibration's children (`gpk.calibrate`): the devices probed, and a model's own step
    probe_entry: str | None = None
    model_step_entry: str | None = None
    # "module:function" returning its own server, whose `start(entry, args)` forks a run's child;
    # None: the standard library's fork server, which preloads the TensorFlow worker
    server: str | None = None
    splits_gpus: bool = False  # carves virtual GPUs out of a real one
    custom_loop: bool = False  # offers mode="explicit", the kit's own training loop
    chooses_all_reduce: bool = False  # all_reduce= picks its gradients' all-reduce
    shards_layers: bool = False  # mesh= and layout_map= shard layers over a device mesh
    validates: bool = False  # validation during training and targets
    reads_tf_data: bool = False  # its batches come through tf.data, which tune prefetches
    xla_always: bool = False  # XLA compiles every step whatever the strategy (jit is Keras's)
    tag: str = ""  # its short name beside a run in tables and figures
    marker: str = "o"  # its points in line figures
    # how far its lines' strategy colours are lightened towards white (0 to 1) in a figure
    # that holds several backends
    shade: float = 0.0

    def __repr__(self) -> str:
        return f"<Backend {self.name}>"
