"""Tasks: what one training step does, for the inner loop (loop.py) to run.

A task builds its models, optimizers and metrics inside the strategy's scope, says what one
replica does with its piece of a global batch, what a test step measures and what a checkpoint
holds. The loop around it (steps per call, epochs, checkpoints, stop and resume, records) is
shared and knows a task only through this interface:

  metrics                the names of the per-step scalars `train_step` returns
  build(config)          make models, optimizers and metrics (called in the scope, seeded)
  train_step(batch, ctx) one replica's step: returns {name: this replica's share}; each share
                         is already divided by the *global* number of examples, so the sum over
                         replicas (what the loop reduces) is the global batch's mean
  test_step(batch, ctx)  update the test metrics with one replica's piece of a test batch
  test_results()         {name: float} after a test pass (reset_test() starts a pass)
  epoch_results()        {name: float} the epoch's own metrics besides the mean of `metrics`
  checkpoint_items()     {name: trackable} saved and restored with the loop's own state

Built in: `Classifier` (the tutorial CNN, the guide's MLP, or any Keras model from a
zero-argument factory) and `GAN` (the loop-from-scratch guide's). A user's own step subclasses
`Task`. `from_config` rebuilds a run's task from its config.json, in any process.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from pathlib import Path

import numpy as np

from .config import DistcoreError, error_line

REFERENCE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
BUILT_IN_MODELS = ("cnn", "mlp")
IMAGE_SHAPES = ((28, 28), (28, 28, 1))  # the images the GAN and the built-in CNN and MLP take
SAVED_MODEL = "saved"  # the model is rebuilt from the run's model.json (Keras's architecture file)
MODEL_FILE = "model.json"


class StepContext:
    """What a replica step knows besides its batch: the global number of examples in this step,
    its own count, the step's number (1-based), and the run's seed. `rows()` gives where this
    replica's examples sit in the global batch (replicas hold consecutive pieces, in replica order)."""

    def __init__(self, global_batch, local, step, seed: int):
        self.global_batch, self.local, self.step, self.seed = global_batch, local, step, seed

    def rows(self):
        """(offset, count) of this replica's examples in the step's global batch. One all-gather,
        made only by tasks that ask."""
        import tensorflow as tf

        context = tf.distribute.get_replica_context()
        counts = context.all_gather(tf.reshape(self.local, [1]), axis=0)
        replica = tf.cast(context.replica_id_in_sync_group, tf.int32)
        return tf.reduce_sum(counts[:replica]), self.local

    def draw(self, kind: str, purpose: int, shape, step=None):
        """Random numbers for the whole global batch, the same on any device set: a stateless
        draw keyed by the seed, `purpose` (0-7) and the step. Take your replica's rows of it."""
        import tensorflow as tf

        step = self.step if step is None else step
        key = tf.stack([tf.constant(self.seed * 8 + purpose, tf.int64), tf.cast(step, tf.int64)])
        draw = tf.random.stateless_normal if kind == "normal" else tf.random.stateless_uniform
        return draw(shape, seed=key)


class Task:
    """Subclass to train your own step (see the module docstring for what to define)."""

    metrics: tuple[str, ...] = ("loss",)
    name = "custom"

    def build(self, config) -> None:
        raise self.missing("build(config)", "make the models and optimizers, inside the strategy's scope")

    def train_step(self, batch, ctx: StepContext) -> dict:
        raise self.missing("train_step(batch, ctx)", "train one replica on its piece of the global batch")

    def test_step(self, batch, ctx: StepContext) -> None:
        pass

    def reset_test(self) -> None:
        pass

    def test_results(self) -> dict:
        return {}

    def epoch_results(self) -> dict:
        return {}

    def reset_epoch(self) -> None:
        pass

    def checkpoint_items(self) -> dict:
        raise self.missing("checkpoint_items()", "name what a checkpoint holds, e.g. {'model': ..., 'optimizer': ...}")

    def missing(self, method: str, does: str) -> DistcoreError:
        return DistcoreError(f"task {type(self).__name__} has no {method} method: define it to {does} (docs/tasks.md).")

    def random_states(self) -> dict:
        """{name: variable} of random layers' generators (Dropout's), saved with each checkpoint so
        a resume draws what the run would have drawn; Keras's tracking leaves them out of the model's."""
        return {}

    def check_data(self, examples) -> None:
        """Refuse data this task cannot train on, with a DistcoreError (before the run is made)."""

    def artifacts(self, run_dir: Path, step: int) -> None:
        """Write files of the task's own (the GAN's image grid) at epoch ends and checkpoints."""

    def export_model(self):
        """The Keras model `distcore.export` writes."""
        raise DistcoreError(
            f"the task {self.name!r} has no model to export: give its class an export_model() method that "
            "returns the Keras model to write (docs/tasks.md)."
        )

    def reference(self) -> str:
        """How config.json names the task, so another process rebuilds it (`from_config`)."""
        return callable_reference(type(self))


def metric_names(task) -> tuple[str, ...]:
    """The task's `metrics`, checked: a tuple of names, one for each scalar train_step returns."""
    names = task.metrics
    if isinstance(names, str) or not isinstance(names, (tuple, list)) or not names:
        raise DistcoreError(
            f"task {type(task).__name__}'s metrics ({names!r}) must be a tuple of names, one for each scalar its "
            "train_step returns, e.g. metrics = ('loss',)."
        )
    if not all(isinstance(n, str) and n for n in names) or len(set(names)) != len(names):
        raise DistcoreError(f"task {type(task).__name__}'s metrics ({names!r}) must be different names, as text.")
    return tuple(names)


def step_values(task, values, names: tuple[str, ...]) -> list:
    """What train_step returned, checked as it is traced: one number for each of `names`, this
    replica's share, as float32."""
    import tensorflow as tf

    own = type(task).__name__
    if not isinstance(values, dict):
        kind = "a tensor" if tf.is_tensor(values) else type(values).__name__
        raise DistcoreError(
            f"{own}.train_step returned {kind}: it must return a dict of this replica's share "
            f"of each metric, {{{', '.join(repr(n) + ': ...' for n in names)}}}."
        )
    missing = [n for n in names if n not in values]
    if missing:
        raise DistcoreError(
            f"{own}.train_step returned no {', '.join(map(repr, missing))}: it returns {sorted(map(str, values))}, "
            f"and its metrics are {names}."
        )
    out = []
    for name in names:
        try:
            value = tf.convert_to_tensor(values[name])
        except (TypeError, ValueError) as err:
            raise DistcoreError(f"{own}.train_step's {name!r} is not a number ({error_line(err)}).") from None
        if not (value.dtype.is_floating or value.dtype.is_integer) or value.shape.rank not in (0, None):
            raise DistcoreError(
                f"{own}.train_step's {name!r} is a {value.dtype.name} of shape {tuple(value.shape)}: it must be one "
                "number, this replica's share of the global batch's mean (its sum over its examples divided by "
                "ctx.global_batch)."
            )
        out.append(tf.cast(value, tf.float32))
    return out


def callable_reference(obj) -> str:
    """'module:qualname' of a function or class; the module may be __main__ (a notebook's)."""
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", "")
    if not module or not qualname or "<" in qualname:
        return f"__main__:{getattr(obj, '__name__', type(obj).__name__)}"
    return f"{module}:{qualname}"


def importable(reference: str, obj=None) -> bool:
    """True when another process can import `reference` (and it is `obj`, when given)."""
    if not REFERENCE.match(reference) or reference.startswith("__main__:"):
        return False
    try:
        found = resolve(reference)
    except DistcoreError:
        return False
    return obj is None or found is obj


def resolve(reference: str):
    """The object a 'module:function' reference names (uvicorn's form)."""
    if not REFERENCE.match(reference or ""):
        raise DistcoreError(f"{reference!r} must name a function as module:function, e.g. mymodels:make_model.")
    module_name, _, attribute = reference.partition(":")
    if "" not in sys.path and os.getcwd() not in sys.path:  # as uvicorn: modules of the folder started from
        sys.path.insert(0, os.getcwd())
    if module_name == "__main__":
        raise DistcoreError(
            f"{reference} was defined in a script or notebook (__main__), which another process cannot "
            "import: pass it again (task= or model=), or move it into a module on the Python path."
        )
    try:
        found = importlib.import_module(module_name)
    except ImportError as err:
        raise DistcoreError(
            f"cannot import {module_name!r} for {reference} ({err}): put the module on the Python path "
            "(PYTHONPATH, or the folder distcore is started from)."
        ) from None
    for part in attribute.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise DistcoreError(f"module {module_name!r} has no {attribute!r} (for {reference}).") from None
    if not callable(found):
        raise DistcoreError(f"{reference} is not a function or class.")
    return found


# --- the classifier --------------------------------------------------------------------------


class Classifier(Task):
    """The tutorial's classifier: a Keras model of integer labels, trained with a sparse categorical
    cross-entropy from logits (scaled by the global batch) and measured by accuracy.

    `model`: "cnn" (the tutorial's), "mlp" (the guide's), a zero-argument function returning an
    uncompiled Keras model (called inside the strategy's scope), or a "module:function" reference.
    """

    metrics = ("loss",)
    name = "classifier"

    def __init__(self, model="cnn"):
        if isinstance(model, str):
            text = model.strip()
            if text.lower() in BUILT_IN_MODELS:
                text = text.lower()
            elif text != SAVED_MODEL and not REFERENCE.match(text):
                raise DistcoreError(
                    f"model {model!r} must be one of: {', '.join(BUILT_IN_MODELS)}, or a Keras model "
                    "factory as module:function."
                )
            self.source = text
        elif is_keras_model(model):  # callable too: called with no inputs, Keras's own TypeError
            raise DistcoreError(
                "model must be a function that builds the model, not a model already built: distcore builds it "
                "inside the strategy's scope (and again on another device set), e.g. Classifier(make_model) "
                "with def make_model(): return keras.Sequential([...])."
            )
        elif callable(model):
            self.source = model
        else:
            raise DistcoreError(
                f"model must be 'cnn', 'mlp', a function that returns a Keras model, or module:function; "
                f"not {type(model).__name__}."
            )
        self.run_dir = None  # where a "saved" model's architecture is read

    # What config.json records as `model`: a built-in name, an importable function, or "saved".
    def model_name(self) -> str:
        if isinstance(self.source, str):
            return self.source
        reference = callable_reference(self.source)
        return reference if importable(reference, self.source) else SAVED_MODEL

    def reference(self) -> str:
        return "classifier"

    def make_model(self, l2: float = 0.0):
        from .model import create_model

        if self.source in BUILT_IN_MODELS:
            return create_model(self.source, l2)
        if self.source == SAVED_MODEL:
            return saved_model(self.run_dir)
        factory = resolve(self.source) if isinstance(self.source, str) else self.source
        model = factory()
        check_keras_model(model, self.source)
        return model

    def build(self, config) -> None:
        import keras

        self.model = self.make_model(getattr(config, "l2", 0.0))
        from .optimizer import create_optimizer

        self.optimizer = create_optimizer(config.optimizer, config.learning_rate)
        # With 2+ replicas, optimizer slots created lazily inside the first replicated step
        # fail ("You must feed a value for placeholder tensor"): build them here, in the scope.
        self.optimizer.build(self.model.trainable_variables)
        self.train_accuracy = keras.metrics.SparseCategoricalAccuracy(name="train_accuracy")
        self.test_loss = keras.metrics.Mean(name="test_loss")
        self.test_accuracy = keras.metrics.SparseCategoricalAccuracy(name="test_accuracy")
        self.loss_object = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    def compute_loss(self, labels, logits, global_batch):
        import tensorflow as tf

        per_example_loss = self.loss_object(labels, logits)
        loss = tf.nn.compute_average_loss(per_example_loss, global_batch_size=global_batch)
        if self.model.losses:
            loss += tf.nn.scale_regularization_loss(tf.add_n(self.model.losses))
        return loss

    def train_step(self, batch, ctx):
        import tensorflow as tf

        from .model import forward

        images, labels = batch
        labels = tf.cast(labels, tf.int32)  # a Datasets pipeline's float labels too
        with tf.GradientTape() as tape:
            logits = forward(self.model, images, training=True)
            loss = self.compute_loss(labels, logits, ctx.global_batch)
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
        self.train_accuracy.update_state(labels, logits)
        return {"loss": loss}

    def test_step(self, batch, ctx) -> None:
        import tensorflow as tf

        from .model import forward

        images, labels = batch
        labels = tf.cast(labels, tf.int32)
        logits = forward(self.model, images, training=False)
        self.test_loss.update_state(self.loss_object(labels, logits))
        self.test_accuracy.update_state(labels, logits)

    def reset_test(self) -> None:
        self.test_loss.reset_state()
        self.test_accuracy.reset_state()

    def test_results(self) -> dict:
        return {"test_loss": float(self.test_loss.result()), "test_accuracy": float(self.test_accuracy.result())}

    def epoch_results(self) -> dict:
        return {"train_accuracy": float(self.train_accuracy.result())}

    def reset_epoch(self) -> None:
        self.train_accuracy.reset_state()

    def checkpoint_items(self) -> dict:
        # Keras 3 metrics are not trackable themselves; their variables are.
        accuracy = {f"train_accuracy_{v.name}": v for v in self.train_accuracy.variables}
        return {"model": self.model, "optimizer": self.optimizer, **accuracy}

    def random_states(self) -> dict:
        return seed_states(self.model)

    def check_data(self, examples) -> None:
        """The data's y must be class labels, and the model must take its rows and give one logit
        per class."""
        from .datasets import real_valued
        from .model import forward

        if real_valued(examples):
            raise DistcoreError(
                "the data's y are real values, not class labels: a classifier trains on class numbers "
                "0..C-1 as integers (one-hot labels are y.argmax(axis=1); a Datasets pipeline's are "
                "tf.cast(y, tf.int32)); a regression needs a task of your own (docs/tasks.md, Your own step)."
            )

        model = self.make_model()
        first = examples.first()[0] if hasattr(examples, "first") else examples.train_images[:1]
        sample = examples.transform_x(first)
        try:
            out = forward(model, sample, training=False)
        except Exception as err:  # the shape the model takes, where it declares one, else Keras's reason
            given, wanted = tuple(sample.shape[1:]), input_shape(model)
            why = f"it takes examples of shape {wanted}." if wanted and wanted != given else error_line(err)
            raise DistcoreError(f"the model cannot take the data's examples of shape {given}: {why}") from None
        if len(out.shape) != 2:
            raise DistcoreError(
                f"the model's output has shape {tuple(out.shape)}: a classifier's must be (batch, classes)."
            )
        if examples.classes is not None and int(out.shape[-1]) < examples.classes:
            raise DistcoreError(
                f"the model gives {int(out.shape[-1])} outputs but the labels go up to {examples.classes - 1}: "
                f"a classifier of {examples.classes} classes needs at least {examples.classes} outputs."
            )

    def export_model(self):
        if self.source in BUILT_IN_MODELS:  # written with Keras's own Conv2D: loads without distcore
            from .model import create_model

            plain = create_model(self.source, 0.0, keras_conv=True)
            plain.set_weights(self.model.get_weights())
            return plain
        return self.model

    def save_architecture(self, run_dir: Path) -> None:
        """Write model.json for a model no other process can import (a notebook's factory)."""
        if self.model_name() == SAVED_MODEL:
            try:
                text = self.model.to_json()
            except Exception as err:  # a subclassed model without get_config
                raise DistcoreError(
                    f"the model cannot be saved as an architecture ({error_line(err)}), so no other process "
                    "could rebuild it: define its factory in a module and pass it as module:function."
                ) from None
            (Path(run_dir) / MODEL_FILE).write_text(text)


def seed_states(model) -> dict:
    """The states of the Keras SeedGenerators in `model` (a Dropout's, ...), in the model's own
    order: they are among its variables but not in what tf.train.Checkpoint saves of it."""
    states = [v for v in model.non_trainable_variables if v.name == "seed_generator_state"]
    return {f"seed_{i}": v for i, v in enumerate(states)}


def input_shape(model) -> tuple | None:
    """The example shape a Keras model declares for its one input (Sequential with an Input, or
    functional), None where it declares none."""
    try:
        (shape,) = [tuple(tensor.shape[1:]) for tensor in model.inputs]
    except (AttributeError, TypeError, ValueError):
        return None
    return shape


def is_keras_model(value) -> bool:
    if "keras" not in sys.modules:  # nothing made with Keras exists yet
        return False
    import keras

    return isinstance(value, keras.Model)


def check_keras_model(model, source) -> None:
    import keras

    if not isinstance(model, keras.Model):
        name = source if isinstance(source, str) else callable_reference(source)
        raise DistcoreError(f"the model factory {name} returned {type(model).__name__}, not a Keras model.")


def saved_model(run_dir):
    """The model of a run whose factory no process can import, from its model.json."""
    import keras

    from .model import _conv2d_class

    _conv2d_class()  # registers distcore's Conv2D, in case the architecture names it
    path = Path(run_dir) / MODEL_FILE if run_dir else None
    if path is None or not path.is_file():
        raise DistcoreError(
            f"the run's model came from a script or notebook and {path or MODEL_FILE} is missing: pass the "
            "task again (task=Classifier(make_model))."
        )
    model = keras.models.model_from_json(path.read_text())
    return model


# --- the GAN ---------------------------------------------------------------------------------

LATENT = 128
GRID = 8  # the image grid is GRID x GRID generated images from fixed latent vectors
NOISE, D_LATENT, G_LATENT, TEST_LATENT, GRID_LATENT = range(5)  # purposes of the random draws


class GAN(Task):
    """The loop-from-scratch guide's GAN: its discriminator and generator (latent size 128), two
    Adam optimizers (3e-4 and 4e-4), binary cross-entropy from logits and 0.05 label noise; the
    discriminator trains on generated then real images, the generator through the discriminator.

    Distributed as the tutorial teaches: each loss is divided by its own global number of
    examples (2G for the discriminator's, G for the generator's). The latent vectors and the
    label noise are drawn for the whole global batch from a stateless generator keyed by the seed
    and the step, and each replica takes its own rows: replicas never generate the same images,
    and a step on 4 replicas computes what the same step on 1 does.
    """

    metrics = ("d_loss", "g_loss")
    name = "gan"

    def reference(self) -> str:
        return "gan"

    def build(self, config) -> None:
        import keras
        import tensorflow as tf

        # Grappler's remapper cannot rewrite the GAN's step (a discriminator inside the empty-batch
        # guard of model.forward): it gives up on the whole graph and logs an error. Turned off,
        # the step compiles to the same graph with no error in the run's log.
        tf.config.optimizer.set_experimental_options({"remapping": False})
        self.seed = config.seed
        self.discriminator, self.generator = gan_models()
        self.d_optimizer = keras.optimizers.Adam(learning_rate=0.0003)
        self.g_optimizer = keras.optimizers.Adam(learning_rate=0.0004)
        self.d_optimizer.build(self.discriminator.trainable_variables)
        self.g_optimizer.build(self.generator.trainable_variables)
        self.loss_fn = keras.losses.BinaryCrossentropy(from_logits=True, reduction="none")
        self.test_d = keras.metrics.Mean(name="test_d_loss")
        self.test_g = keras.metrics.Mean(name="test_g_loss")

    def latents(self, ctx, purpose, step=None):
        import tensorflow as tf

        offset, count = ctx.rows()
        every = ctx.draw("normal", purpose, tf.stack([ctx.global_batch, LATENT]), step)
        return every[offset : offset + count], offset, count

    def train_step(self, batch, ctx):
        import tensorflow as tf

        from .model import forward

        real = tf.reshape(batch[0], (-1, 28, 28, 1))
        latent, offset, count = self.latents(ctx, D_LATENT)
        generated = forward(self.generator, latent, training=True)
        combined = tf.concat([generated, real], axis=0)
        labels = tf.concat([tf.ones((count, 1)), tf.zeros((count, 1))], axis=0)
        noise = ctx.draw("uniform", NOISE, tf.stack([2, ctx.global_batch]))  # (generated, real) x global rows
        labels += 0.05 * tf.concat([noise[0, offset : offset + count], noise[1, offset : offset + count]], 0)[:, None]
        with tf.GradientTape() as tape:
            predictions = forward(self.discriminator, combined, training=True)
            d_loss = tf.reduce_sum(self.loss_fn(labels, predictions)) / tf.cast(2 * ctx.global_batch, tf.float32)
        grads = tape.gradient(d_loss, self.discriminator.trainable_variables)
        self.d_optimizer.apply_gradients(zip(grads, self.discriminator.trainable_variables))

        latent, _, _ = self.latents(ctx, G_LATENT)
        misleading = tf.zeros((count, 1))
        with tf.GradientTape() as tape:
            predictions = forward(self.discriminator, forward(self.generator, latent, training=True), training=True)
            g_loss = tf.reduce_sum(self.loss_fn(misleading, predictions)) / tf.cast(ctx.global_batch, tf.float32)
        grads = tape.gradient(g_loss, self.generator.trainable_variables)
        self.g_optimizer.apply_gradients(zip(grads, self.generator.trainable_variables))
        return {"d_loss": d_loss, "g_loss": g_loss}

    def test_step(self, batch, ctx) -> None:
        """The losses on test images, with no label noise and latent vectors keyed by the test
        batch: the same numbers on any device set."""
        import tensorflow as tf

        from .model import forward

        real = tf.reshape(batch[0], (-1, 28, 28, 1))
        latent, _, count = self.latents(ctx, TEST_LATENT)
        generated = forward(self.generator, latent, training=False)
        fake_scores = forward(self.discriminator, generated, training=False)
        real_scores = forward(self.discriminator, real, training=False)
        ones, zeros = tf.ones((count, 1)), tf.zeros((count, 1))
        self.test_d.update_state(self.loss_fn(tf.concat([ones, zeros], 0), tf.concat([fake_scores, real_scores], 0)))
        self.test_g.update_state(self.loss_fn(zeros, fake_scores))

    def reset_test(self) -> None:
        self.test_d.reset_state()
        self.test_g.reset_state()

    def test_results(self) -> dict:
        return {"test_d_loss": float(self.test_d.result()), "test_g_loss": float(self.test_g.result())}

    def checkpoint_items(self) -> dict:
        return {
            "generator": self.generator,
            "discriminator": self.discriminator,
            "d_optimizer": self.d_optimizer,
            "g_optimizer": self.g_optimizer,
        }

    def check_data(self, examples) -> None:
        first = examples.first()[0] if hasattr(examples, "first") else examples.train_images[:1]
        shape = tuple(first.shape[1:])
        if shape not in IMAGE_SHAPES:
            raise DistcoreError(
                f"the GAN generates 28x28 grey images and trains on images of that shape; the data's "
                f"examples have shape {shape}."
            )

    def grid(self) -> np.ndarray:
        """The GRID x GRID images the generator draws from fixed latent vectors (the same for every
        checkpoint of a run, so epochs compare), as one uint8 (H, W) array."""
        import tensorflow as tf

        key = tf.constant([self.seed * 8 + GRID_LATENT, 0], tf.int64)
        latent = tf.random.stateless_normal((GRID * GRID, LATENT), seed=key)
        images = self.generator(latent, training=False).numpy()[..., 0]
        return tile(images)

    def artifacts(self, run_dir: Path, step: int) -> None:
        write_png(self.grid(), Path(run_dir) / "images" / f"step-{step:08d}.png")

    def export_model(self):
        return self.generator


def gan_models():
    """The guide's discriminator and generator."""
    import keras
    from keras import layers

    discriminator = keras.Sequential(
        [
            keras.Input(shape=(28, 28, 1)),
            layers.Conv2D(64, (3, 3), strides=(2, 2), padding="same"),
            layers.LeakyReLU(negative_slope=0.2),
            layers.Conv2D(128, (3, 3), strides=(2, 2), padding="same"),
            layers.LeakyReLU(negative_slope=0.2),
            layers.GlobalMaxPooling2D(),
            layers.Dense(1),
        ],
        name="discriminator",
    )
    generator = keras.Sequential(
        [
            keras.Input(shape=(LATENT,)),
            layers.Dense(7 * 7 * 128),
            layers.LeakyReLU(negative_slope=0.2),
            layers.Reshape((7, 7, 128)),
            layers.Conv2DTranspose(128, (4, 4), strides=(2, 2), padding="same"),
            layers.LeakyReLU(negative_slope=0.2),
            layers.Conv2DTranspose(128, (4, 4), strides=(2, 2), padding="same"),
            layers.LeakyReLU(negative_slope=0.2),
            layers.Conv2D(1, (7, 7), padding="same", activation="sigmoid"),
        ],
        name="generator",
    )
    return discriminator, generator


def tile(images: np.ndarray, border: int = 2) -> np.ndarray:
    """(N, h, w) floats in [0, 1] -> one uint8 grid image, GRID per row, with dark borders."""
    count, h, w = images.shape
    columns = GRID
    rows = -(-count // columns)
    out = np.zeros((rows * (h + border) + border, columns * (w + border) + border), np.uint8)
    for i, image in enumerate(images):
        r, c = divmod(i, columns)
        y, x = border + r * (h + border), border + c * (w + border)
        out[y : y + h, x : x + w] = np.clip(image * 255.0 + 0.5, 0, 255).astype(np.uint8)
    return out


def write_png(image: np.ndarray, path: Path, scale: int = 2) -> Path:
    """Write a uint8 (H, W) image as PNG, enlarged `scale` times (TensorFlow's encoder)."""
    import tensorflow as tf

    big = np.kron(image, np.ones((scale, scale), np.uint8))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(tf.io.encode_png(big[..., None]).numpy())
    tmp.replace(path)
    return path


# --- rebuilding a run's task -----------------------------------------------------------------


def from_config(config, run_dir=None, given: Task | None = None) -> Task:
    """The task of a run: `given` (the caller's own object), else rebuilt from config.json's
    `task` and `model`: "classifier" with a model name, "gan", or a module:function that returns a Task."""
    if given is not None:
        return given
    name = config.task
    if name == "classifier":
        task = Classifier(config.model)
        task.run_dir = run_dir
        return task
    if name == "gan":
        return GAN()
    task = resolve(name)()
    if not isinstance(task, Task):
        raise DistcoreError(f"{name} returned {type(task).__name__}, not a distcore Task (subclass distcore.Task).")
    return task


def task_reference(task: Task) -> tuple[str, str]:
    """(task, model) as config.json records them."""
    if isinstance(task, Classifier) and type(task) is Classifier:
        return "classifier", task.model_name()
    if isinstance(task, GAN) and type(task) is GAN:
        return "gan", "cnn"
    return task.reference(), "cnn"


def coerce(task) -> Task:
    """A Task from what a caller passes: a Task, "classifier", "gan" or a module:function."""
    if isinstance(task, Task):
        return task
    if isinstance(task, str):
        text = task.strip()
        if text.lower() == "classifier":
            return Classifier()
        if text.lower() == "gan":
            return GAN()
        made = resolve(text)()
        if not isinstance(made, Task):
            raise DistcoreError(f"{text} returned {type(made).__name__}, not a distcore Task.")
        return made
    raise DistcoreError(
        f"task must be a distcore Task (Classifier(...), GAN(), or your subclass), 'classifier', 'gan' or "
        f"module:function; not {type(task).__name__}."
    )
