"""Model builders the tests hand to workers (importable, so they pickle by reference)."""

from __future__ import annotations

import os
import signal
import time

import numpy as np

FEATURES = 12
CLASSES = 3


def dense_chain(widths, optimizer):
    """A Sequential of ReLU Dense layers of `widths`, then logits: cuttable between any layers."""
    import keras

    model = keras.Sequential(
        [keras.Input((FEATURES,))]
        + [keras.layers.Dense(width, activation="relu") for width in widths]
        + [keras.layers.Dense(CLASSES)]
    )
    model.compile(
        optimizer=optimizer,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def instant_result(spec, step_time_s=0.01, **fields):
    """A finished run's row for `spec` without a worker: for tests of what happens around runs."""
    from gpu_parallel_kit.runs.results.run_result import RunResult

    return RunResult(
        **spec.result_identity(),
        status="ok",
        step_time_s=step_time_s,
        throughput_samples_s=spec.global_batch / step_time_s,
        **fields,
    )


def measured_row(run_id, strategy, devices, step_time_s, experiment="e1", **fields):
    """A finished run's row built by hand: a global batch of 256 unless `fields` say otherwise,
    its throughput from its step, on virtual devices."""
    from gpu_parallel_kit.runs.results.run_result import RunResult

    fields.setdefault("global_batch", 256)
    fields.setdefault("virtual", True)
    return RunResult(
        run_id=run_id,
        experiment_id=experiment,
        strategy=strategy,
        devices=devices,
        status="ok",
        step_time_s=step_time_s,
        throughput_samples_s=fields["global_batch"] / step_time_s,
        **fields,
    )


def saved_weights(path):
    """The arrays a run saved with save_weights=, in model.get_weights() order."""
    with np.load(path) as saved:
        return [saved[f"arr_{i}"] for i in range(len(saved.files))]


def runs_side_by_side(experiment, folder, plans, at_once: int = 2):
    """Start `experiment.run(**settings)` for each of `plans` (a dict of name to settings,
    strategy included), `at_once` at a time, each saving its weights to `folder/<name>.npz`;
    give back a dict of name to a future of (its row, its weights' path): `.result()` waits
    for that run and raises what it raised.

    A run's process spends most of its life compiling on one core, so two runs started
    together keep a two-core machine's cores busy; the training gate still lets one train
    at a time (`runs/scheduling/training_gate.py`)."""
    from concurrent.futures import ThreadPoolExecutor

    def run(name, settings):
        path = folder / f"{name}.npz"
        return experiment.run(**settings, save_weights=str(path)), path

    pool = ThreadPoolExecutor(at_once, thread_name_prefix="side-by-side")
    futures = {name: pool.submit(run, name, settings) for name, settings in plans.items()}
    pool.shutdown(wait=False)
    return futures


def largest_difference(weights, reference):
    """The largest absolute difference between two lists of weight arrays."""
    return max(float(np.max(np.abs(a - b))) for a, b in zip(weights, reference, strict=True))


def small_mlp():
    import keras

    return dense_chain([16], keras.optimizers.SGD(learning_rate=0.1))


def small_experiment(model, **settings):
    """The tests' usual experiment: small data, global batch 32, a few steps, no progress bar."""
    import gpu_parallel_kit as gpk

    defaults = dict(data=small_data(), batch_size=32, epochs=1, steps_per_epoch=3, progress=False)
    return gpk.Experiment(model=model, **{**defaults, **settings})


def small_mlp_experiment(**settings):
    """`small_experiment` on the small MLP with whole epochs (the API's own steps per epoch): for
    tests that plan, validate or answer runs on a fake machine."""
    return small_experiment(**{"model": small_mlp, "steps_per_epoch": None, **settings})


def small_data(samples: int = 256, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((samples, FEATURES)).astype("float32")
    y = (x[:, 0] > 0).astype("int32") + (x[:, 1] > 1).astype("int32")
    return x, y


def raising_builder():
    raise RuntimeError("the builder broke on purpose")


def exiting_builder():
    os._exit(3)


def self_killing_builder():
    os.kill(os.getpid(), signal.SIGKILL)


def sleeping_builder():
    time.sleep(120)


def memory_hungry_builder():
    raise MemoryError("cannot allocate 64 GiB for the embedding table")


def slow_when_distributed():
    """Trains normally on one device and hangs on several: a comparison to interrupt midway."""
    import tensorflow as tf

    if tf.distribute.get_strategy().num_replicas_in_sync > 1:
        time.sleep(120)
    return small_mlp()


def deep_mlp():
    """Seven Dense layers: enough to cut into 2 or 4 stages."""
    import keras

    return dense_chain([16] * 6, keras.optimizers.Adam(learning_rate=0.01))


def regularized_first_stage():
    """`deep_mlp` whose first layer adds an activity regularizer's loss: cut into 2 stages, a
    loss added in the first stage, away from the last stage's loss."""
    import keras

    model = deep_mlp()
    model.layers[0].activity_regularizer = keras.regularizers.L2(0.05)
    return model


def batch_norm_first():
    """BatchNormalization on the raw inputs, so its statistics can be checked by hand."""
    import keras

    model = keras.Sequential(
        [
            keras.Input((FEATURES,)),
            keras.layers.BatchNormalization(momentum=0.5),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dense(CLASSES),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=0.1),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def residual_model():
    """A skip connection around a layer: the input rides past it into the Add."""
    import keras

    inputs = keras.Input((FEATURES,))
    hidden = keras.layers.Dense(FEATURES, activation="relu")(inputs)
    outputs = keras.layers.Dense(CLASSES)(keras.layers.Add(name="add")([inputs, hidden]))
    model = keras.Model(inputs, outputs)
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    return model


def wide_mlp():
    """About 2.4 MiB of parameters and Adam state: over a 1 MiB budget unless split in four."""
    return dense_chain([256] * 4, "adam")


def separable_data(samples: int = 512, seed: int = 0):
    """Three well-separated clusters: a small MLP passes 90% accuracy within an epoch or two."""
    rng = np.random.default_rng(seed)
    centers = 2.5 * np.eye(CLASSES, FEATURES, dtype="float32")
    y = rng.integers(0, CLASSES, samples).astype("int32")
    x = centers[y] + rng.standard_normal((samples, FEATURES)).astype("float32") * 0.7
    return x.astype("float32"), y


def subclassed_model():
    """A subclassed keras.Model: layers made in __init__, used in call; no variables until
    called."""
    import keras

    class Net(keras.Model):
        def __init__(self):
            super().__init__(name="net")
            self.hidden = keras.layers.Dense(16, activation="relu")
            self.out = keras.layers.Dense(CLASSES)

        def call(self, inputs):
            return self.out(self.hidden(inputs))

    model = Net()
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=0.1),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def deferred_sequential():
    """A Sequential without keras.Input, built on its first call, as many tutorials write it."""
    import keras

    model = keras.Sequential(
        [keras.layers.Dense(16, activation="relu"), keras.layers.Dense(CLASSES)]
    )
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=0.1),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def two_input_model():
    """A functional model with two named inputs, fed a dict; the second input joins late."""
    import keras

    numbers = keras.Input((FEATURES,), name="numbers")
    extra = keras.Input((4,), name="extra")
    hidden = keras.layers.Dense(16, activation="relu", name="h1")(numbers)
    hidden = keras.layers.Dense(16, activation="relu", name="h2")(hidden)
    joined = keras.layers.Concatenate(name="join")([hidden, extra])
    outputs = keras.layers.Dense(CLASSES, name="head")(joined)
    model = keras.Model({"numbers": numbers, "extra": extra}, outputs)
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=0.1),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def two_input_dataset():
    """Unbatched ({"numbers", "extra"}, label) samples for `two_input_model`."""
    import tensorflow as tf

    x, y = small_data(256)
    extra = np.tile(np.linspace(-1, 1, 4, dtype="float32"), (len(x), 1)) * x[:, :1]
    return tf.data.Dataset.from_tensor_slices(({"numbers": x, "extra": extra}, y))


def two_input_arrays():
    """`two_input_dataset`'s samples as arrays: a dict of them for x, as `model.fit` takes it."""
    x, y = small_data(256)
    extra = np.tile(np.linspace(-1, 1, 4, dtype="float32"), (len(x), 1)) * x[:, :1]
    return {"numbers": x, "extra": extra}, y


def _compiled(model, learning_rate: float = 0.01):
    """Compiled to run eagerly, as the pipeline's stages run: at random initialisation a deep
    network with BatchNormalization on tiny feature maps is numerically chaotic, so its
    gradients from a compiled graph and from eager execution of the same model differ by about
    1 % for ResNet50 at 32×32 (measured: max |difference| / max |gradient| = 0.011), far above
    the 1e-5 the equivalence tests ask. Eager on both sides compares the same arithmetic."""
    import keras

    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        run_eagerly=True,
    )
    return model


def resnet50():
    """keras.applications.ResNet50 without weights (nothing is downloaded), 32×32 inputs."""
    import keras

    return _compiled(
        keras.applications.ResNet50(
            weights=None, input_shape=(32, 32, 3), classes=CLASSES, classifier_activation=None
        )
    )


def mobilenet_v2():
    """keras.applications.MobileNetV2 without weights, 32×32 inputs, a narrow width."""
    import keras

    return _compiled(
        keras.applications.MobileNetV2(
            weights=None,
            input_shape=(32, 32, 3),
            classes=CLASSES,
            alpha=0.35,
            classifier_activation=None,
        )
    )


def transformer_encoder():
    """Embedding, multi-head attention, residual Add + LayerNormalization, feed-forward."""
    import keras

    tokens = keras.Input((16,), dtype="int32", name="tokens")
    x = keras.layers.Embedding(50, 32, name="embed")(tokens)
    for block in range(2):
        attended = keras.layers.MultiHeadAttention(2, 16, name=f"attention_{block}")(x, x)
        x = keras.layers.LayerNormalization(name=f"norm_a{block}")(
            keras.layers.Add(name=f"residual_a{block}")([x, attended])
        )
        hidden = keras.layers.Dense(64, activation="relu", name=f"ff_in_{block}")(x)
        hidden = keras.layers.Dense(32, name=f"ff_out_{block}")(hidden)
        x = keras.layers.LayerNormalization(name=f"norm_b{block}")(
            keras.layers.Add(name=f"residual_b{block}")([x, hidden])
        )
    pooled = keras.layers.GlobalAveragePooling1D(name="pool")(x)
    return _compiled(keras.Model(tokens, keras.layers.Dense(CLASSES, name="head")(pooled)))


def small_unet():
    """Two downsamplings and two upsamplings, each joined to its skip: long skips cross stages."""
    import keras

    images = keras.Input((32, 32, 3), name="images")
    down1 = keras.layers.Conv2D(8, 3, padding="same", activation="relu", name="down1")(images)
    pool1 = keras.layers.MaxPooling2D(name="pool1")(down1)
    down2 = keras.layers.Conv2D(16, 3, padding="same", activation="relu", name="down2")(pool1)
    pool2 = keras.layers.MaxPooling2D(name="pool2")(down2)
    middle = keras.layers.Conv2D(16, 3, padding="same", activation="relu", name="middle")(pool2)
    up2 = keras.layers.UpSampling2D(name="up2")(middle)
    join2 = keras.layers.Concatenate(name="join2")([up2, down2])
    conv2 = keras.layers.Conv2D(8, 3, padding="same", activation="relu", name="conv2")(join2)
    up1 = keras.layers.UpSampling2D(name="up1")(conv2)
    join1 = keras.layers.Concatenate(name="join1")([up1, down1])
    conv1 = keras.layers.Conv2D(8, 3, padding="same", activation="relu", name="conv1")(join1)
    pooled = keras.layers.GlobalAveragePooling2D(name="pool")(conv1)
    return _compiled(keras.Model(images, keras.layers.Dense(CLASSES, name="head")(pooled)))


def small_images(samples: int = 64, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((samples, 32, 32, 3)).astype("float32")
    return x, (x[:, :, :, 0].mean(axis=(1, 2)) > 0).astype("int32")


def small_tokens(samples: int = 64, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 50, (samples, 16)).astype("int32")
    return x, (x[:, 0] > 25).astype("int32")


def two_output_model():
    """A functional model with a classifier head and a regression head, one loss each."""
    import keras

    inputs = keras.Input((FEATURES,), name="features")
    shared = keras.layers.Dense(16, activation="relu", name="shared")(inputs)
    classes = keras.layers.Dense(CLASSES, name="classes")(shared)
    value = keras.layers.Dense(1, name="value")(keras.layers.Dense(8, name="value_hidden")(shared))
    model = keras.Model(inputs, [classes, value])
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=0.05),
        loss=[keras.losses.SparseCategoricalCrossentropy(from_logits=True), "mse"],
        loss_weights=[1.0, 0.5],
    )
    return model


def two_output_dataset():
    """Unbatched (x, (label, value)) samples for `two_output_model`."""
    import tensorflow as tf

    x, y = small_data(256)
    return tf.data.Dataset.from_tensor_slices((x, (y, x[:, :1] * 2.0)))


def shared_layer_model():
    """One Dense layer called at two places: its weights cannot sit on two devices."""
    import keras

    inputs = keras.Input((FEATURES,))
    twice = keras.layers.Dense(FEATURES, activation="relu", name="twice")
    hidden = twice(twice(inputs))
    model = keras.Model(inputs, keras.layers.Dense(CLASSES, name="head")(hidden))
    return _compiled(model)


def nested_model():
    """A functional model used as one layer of another: a pipeline cuts inside it."""
    import keras

    inner_in = keras.Input((16,))
    inner = keras.Model(
        inner_in,
        keras.layers.Dense(16, activation="relu", name="inner_dense")(inner_in),
        name="inner",
    )
    inputs = keras.Input((FEATURES,))
    x = keras.layers.Dense(16, activation="relu", name="before")(inputs)
    x = inner(x)
    x = keras.layers.Dense(16, activation="relu", name="after")(x)
    return _compiled(keras.Model(inputs, keras.layers.Dense(CLASSES, name="head")(x)))


def dropout_chain(rate: float = 0.3):
    """Dense layers with seeded Dropout between them: the masks decide the gradients."""
    import keras

    layers = []
    for i in range(3):
        layers += [
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dropout(rate, seed=7 + i),
        ]
    model = keras.Sequential([keras.Input((FEATURES,)), *layers, keras.layers.Dense(CLASSES)])
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=0.1),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def transformer_block():
    """A functional Transformer encoder block over float features: attention, then a feed-forward
    pair, each with a residual and a LayerNormalization; pooled to logits."""
    import keras

    tokens, width = 8, 16
    inputs = keras.Input((tokens * width,))
    x = keras.layers.Reshape((tokens, width))(inputs)
    attended = keras.layers.MultiHeadAttention(num_heads=4, key_dim=4)(x, x)
    x = keras.layers.LayerNormalization()(x + attended)
    hidden = keras.layers.Dense(32, activation="gelu")(x)
    x = keras.layers.LayerNormalization()(x + keras.layers.Dense(width)(hidden))
    outputs = keras.layers.Dense(CLASSES)(keras.layers.GlobalAveragePooling1D()(x))
    model = keras.Model(inputs, outputs, name="transformer_block")
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=0.1),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def transformer_data(samples: int = 256, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((samples, 8 * 16)).astype("float32")
    return x, (x[:, 0] > 0).astype("int32") + (x[:, 1] > 1).astype("int32")


def vgg16_small():
    """keras.applications.VGG16 without weights (nothing is downloaded), 32×32 inputs, pooled,
    then logits: an applications network without BatchNormalization, whose arithmetic is not
    chaotic at random initialisation (MobileNetV2's, sharded or not, differs by about 1 % after
    one step), so 1e-5 can be asked of it under XLA."""
    import keras

    base = keras.applications.VGG16(
        weights=None, include_top=False, input_shape=(32, 32, 3), pooling="avg"
    )
    model = keras.Sequential([base, keras.layers.Dense(CLASSES)], name="vgg16_small")
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=0.001),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def nested_blocks_model():
    """A functional model whose body is a functional `keras.Model` used as a block and a
    Sequential block, as users compose them: a pipeline can cut inside both."""
    import keras

    x = keras.Input((FEATURES,), name="x")
    block_in = keras.Input((FEATURES,), name="block_in")
    hidden = keras.layers.Dense(16, activation="relu", name="inner_a")(block_in)
    inner_b = keras.layers.Dense(16, activation="relu", name="inner_b")
    block = keras.Model(block_in, inner_b(hidden), name="block")
    chain = keras.Sequential(
        [keras.Input((16,)), keras.layers.Dense(16, activation="relu", name="chain_a")],
        name="chain",
    )
    outputs = keras.layers.Dense(CLASSES, name="head")(chain(block(x)))
    model = keras.Model(x, outputs)
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=0.1),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def nested_subclassed_model(rebuildable: bool = True):
    """A functional model around a subclassed `keras.Model` block, whose call() hides its two
    layers: the block is one unit of a pipeline. Not `rebuildable`: its config does not rebuild
    it, so no stage can be made of it on a device."""
    import keras

    class Block(keras.Model):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.first = keras.layers.Dense(16, activation="relu")
            self.second = keras.layers.Dense(16, activation="relu")

        def call(self, inputs):
            return self.second(self.first(inputs))

        def get_config(self):  # rebuilt on its stage's device from this
            return {"name": self.name}

    class Fixed(Block):
        def __init__(self):  # takes no name, though its config gives one
            super().__init__(name="hidden_block")

    x = keras.Input((FEATURES,))
    hidden = (Block(name="hidden_block") if rebuildable else Fixed())(x)
    model = keras.Model(x, keras.layers.Dense(CLASSES, name="head")(hidden))
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=0.1),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def conv_norm_block():
    """Two convolutions with batch normalization and a depthwise convolution between them: the
    kit's layout splits the pair on its channels (`sharding/layout.py`)."""
    import keras

    images = keras.Input((32, 32, 3), name="images")
    x = keras.layers.Conv2D(8, 1, name="expand")(images)
    x = keras.layers.BatchNormalization(name="expand_bn")(x)
    x = keras.layers.ReLU(name="expand_relu")(x)
    x = keras.layers.DepthwiseConv2D(3, padding="same", name="depthwise")(x)
    x = keras.layers.MaxPooling2D(name="pool")(x)
    x = keras.layers.Conv2D(4, 3, padding="same", name="project")(x)
    x = keras.layers.BatchNormalization(name="project_bn")(x)
    pooled = keras.layers.GlobalAveragePooling2D(name="gap")(x)
    model = keras.Model(images, keras.layers.Dense(CLASSES, name="head")(pooled))
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=0.01),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model
