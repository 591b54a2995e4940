"""TensorFlow: tf.distribute trains, children forked from the standard library's fork server."""

from __future__ import annotations

from .record import Backend

TENSORFLOW = Backend(
    name="tensorflow",
    display="TensorFlow",
    summary="TensorFlow, tf.distribute",
    package="tensorflow",
    default=True,
    run_entry="gpu_parallel_kit.worker.tensorflow.run:worker_main",
    discovery_entry="gpu_parallel_kit.worker.tensorflow.device_setup:discover_with_tensorflow",
    cluster_entry="gpu_parallel_kit.cluster.local:launch_local_cluster",
    member_entry="gpu_parallel_kit.worker.tensorflow.member:run_member",
    served_entry="gpu_parallel_kit.worker.tensorflow.member:served_member_main",
    step_entry="gpu_parallel_kit.worker.tensorflow.member:slurm_step_member",
    probe_entry="gpu_parallel_kit.worker.tensorflow.device_probe:calibrate_with_tensorflow",
    model_step_entry="gpu_parallel_kit.worker.tensorflow.device_probe:model_steps_with_tensorflow",
    server=None,
    splits_gpus=True,
    custom_loop=True,
    chooses_all_reduce=True,
    validates=True,
    reads_tf_data=True,
    tag="tf",
    marker="o",
)
