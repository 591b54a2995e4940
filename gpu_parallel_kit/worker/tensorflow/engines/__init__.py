"""Engines train a built model on one run's devices with tf.distribute; one class per strategy.

Each strategy's record names its engine (`strategies.<name>.worker_classes["tensorflow"]`, e.g.
"gpu_parallel_kit.worker.tensorflow.engines.data:DataParallelEngine"); `tensorflow/run.py`
resolves it. Nothing is imported here, so the run imports only the engine it trains with.
"""
