"""TensorFlow runs: the skeleton's steps on tf.distribute (`run`), the tf.data pipelines
(`datasets`), and one engine per strategy (`engines/`). Nothing is imported here."""
