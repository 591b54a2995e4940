"""JAX: Keras's own `keras.distribution` trains, children forked from the kit's JAX server."""

from __future__ import annotations

from .record import Backend

JAX = Backend(
    name="jax",
    display="JAX",
    summary="Keras on JAX, keras.distribution",
    package="jax",
    run_entry="gpu_parallel_kit.worker.jax.run:jax_worker_main",
    discovery_entry="gpu_parallel_kit.worker.jax.device_setup:discover_with_jax",
    cluster_entry="gpu_parallel_kit.cluster.local:launch_local_cluster",
    member_entry="gpu_parallel_kit.worker.jax.member:run_member",
    served_entry="gpu_parallel_kit.worker.jax.member:served_member_main",
    step_entry="gpu_parallel_kit.worker.jax.member:slurm_step_member",
    probe_entry="gpu_parallel_kit.worker.jax.device_probe:calibrate_with_jax",
    model_step_entry="gpu_parallel_kit.worker.jax.device_probe:model_steps_with_jax",
    server="gpu_parallel_kit.runs.processes.server_client:jax_server",
    shards_layers=True,
    xla_always=True,
    tag="jax",
    marker="^",
    shade=0.45,
)
