"""The inner loop: one replica step, and N steps per `tf.function` call.

This module knows how to run steps, not when: the outer loop (controller.py)
decides how many steps to run, when to test, checkpoint, log and stop.

The loss follows the custom-training tutorial: per-example losses with no
reduction, summed and divided by the *global* batch size
(`tf.nn.compute_average_loss`), plus `tf.nn.scale_regularization_loss` of the
model's own losses, so that summing the replicas' gradients (what
MirroredStrategy does) gives the gradient of the global batch's mean loss.
Current TensorFlow spells the tutorial's `experimental_run_v2` as `run`, and
Keras 3 losses take `reduction="none"` instead of `Reduction.NONE`.
"""

from __future__ import annotations

import logging

import keras
import tensorflow as tf

from . import inputs
from .config import TrainConfig
from .model import create_model, forward
from .optimizer import create_optimizer

SUM = tf.distribute.ReduceOp.SUM


class OwnTracingNotRetracing(logging.Filter):
    """Drops TensorFlow's warning that one of distcore's per-object functions (a StepRunner's
    step loop, a run's TensorBoard series writer) "triggered tf.function retracing".

    TensorFlow counts traces by the Python function's code, across all objects: each new
    StepRunner (a Controller, an evaluation) traces its own functions once, as it must, and
    from the fifth in one process (a notebook's) TensorFlow warns of retracing in a loop.
    Its warnings about other functions pass.
    """

    def __init__(self, name: str):
        super().__init__()
        self.name = name

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not ("triggered tf.function retracing" in message and self.name in message)


def quiet_own_tracing(name: str = f"{__name__}.StepRunner object") -> None:
    """Drop the retracing warnings that name `name` (as TensorFlow prints the function)."""
    logger = tf.get_logger()
    if not any(isinstance(f, OwnTracingNotRetracing) and f.name == name for f in logger.filters):
        logger.addFilter(OwnTracingNotRetracing(name))


class StepRunner:
    """Model, optimizer, metrics and compiled step loops for one strategy."""

    def __init__(self, strategy, config: TrainConfig):
        self.strategy = strategy
        self.config = config
        # Same initial weights on any device set, and in any thread of a process.
        with inputs.seeded(config.seed), strategy.scope():
            self.model = create_model(config.model, config.l2)
            self.optimizer = create_optimizer(config.optimizer, config.learning_rate)
            # Keras 3 trap: with 2+ replicas, optimizer slots created lazily inside the
            # first replicated step fail ("You must feed a value for placeholder tensor").
            self.optimizer.build(self.model.trainable_variables)
            self.train_accuracy = keras.metrics.SparseCategoricalAccuracy(name="train_accuracy")
            self.test_loss = keras.metrics.Mean(name="test_loss")
            self.test_accuracy = keras.metrics.SparseCategoricalAccuracy(name="test_accuracy")
            only_first = tf.VariableAggregation.ONLY_FIRST_REPLICA
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, aggregation=only_first, name="step")
            # Where in the data the run is: completed epochs and steps into the current one.
            self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False, aggregation=only_first)
            self.epoch_steps = tf.Variable(0, dtype=tf.int64, trainable=False, aggregation=only_first)
            # The epoch's running loss (sum of loss x examples) and example count, so a
            # resumed epoch reports the same train loss as an uninterrupted one.
            self.epoch_loss_sum = tf.Variable(0.0, dtype=tf.float64, trainable=False, aggregation=only_first)
            self.epoch_examples = tf.Variable(0, dtype=tf.int64, trainable=False, aggregation=only_first)
        self.loss_object = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
        quiet_own_tracing()
        self.train_steps = tf.function(self._train_steps)
        self.test_pass = tf.function(self._test_pass)

    def checkpoint(self) -> tf.train.Checkpoint:
        # Keras 3 metrics are not trackable themselves; their variables are.
        accuracy_state = {f"train_accuracy_{v.name}": v for v in self.train_accuracy.variables}
        return tf.train.Checkpoint(
            model=self.model,
            optimizer=self.optimizer,
            step=self.step,
            epoch=self.epoch,
            epoch_steps=self.epoch_steps,
            epoch_loss_sum=self.epoch_loss_sum,
            epoch_examples=self.epoch_examples,
            **accuracy_state,
        )

    # --- replica context -------------------------------------------------------------

    def compute_loss(self, labels, logits, global_batch):
        per_example_loss = self.loss_object(labels, logits)
        loss = tf.nn.compute_average_loss(per_example_loss, global_batch_size=global_batch)
        if self.model.losses:
            loss += tf.nn.scale_regularization_loss(tf.add_n(self.model.losses))
        return loss

    def replica_train_step(self, images, labels):
        # The global batch size is the number of examples in this step across all
        # replicas: the configured G, except for a partial last batch. Dividing that
        # one by G would report (and train on) a loss scaled down by n/G.
        local = tf.shape(labels)[0]
        global_batch = tf.distribute.get_replica_context().all_reduce(SUM, local)
        with tf.GradientTape() as tape:
            logits = forward(self.model, images, training=True)
            loss = self.compute_loss(labels, logits, global_batch)
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
        self.train_accuracy.update_state(labels, logits)
        return loss, local

    def replica_test_step(self, images, labels):
        logits = forward(self.model, images, training=False)
        self.test_loss.update_state(self.loss_object(labels, logits))
        self.test_accuracy.update_state(labels, logits)

    # --- cross-replica context ----------------------------------------------------------

    def _train_steps(self, iterator, num_steps):
        """Run up to `num_steps` steps; stop early, cleanly, when the iterator runs out.

        Returns the per-step global losses and example counts (host reads them once
        per call, not once per step).
        """
        losses = tf.TensorArray(tf.float32, size=0, dynamic_size=True)
        counts = tf.TensorArray(tf.int32, size=0, dynamic_size=True)
        done = tf.constant(0)
        for _ in tf.range(num_steps):
            optional = iterator.get_next_as_optional()
            if not optional.has_value():
                break
            images, labels = optional.get_value()
            per_replica_loss, per_replica_count = self.strategy.run(self.replica_train_step, args=(images, labels))
            loss = self.strategy.reduce(SUM, per_replica_loss, axis=None)
            count = self.strategy.reduce(SUM, per_replica_count, axis=None)
            losses = losses.write(done, loss)
            counts = counts.write(done, count)
            self.epoch_loss_sum.assign_add(tf.cast(loss, tf.float64) * tf.cast(count, tf.float64))
            self.epoch_examples.assign_add(tf.cast(count, tf.int64))
            done += 1
        self.step.assign_add(tf.cast(done, tf.int64))
        self.epoch_steps.assign_add(tf.cast(done, tf.int64))
        return losses.stack(), counts.stack()

    def _test_pass(self, iterator):
        for images, labels in iterator:
            self.strategy.run(self.replica_test_step, args=(images, labels))

    # --- plain-Python views -------------------------------------------------------------

    def run_test(self, dist_dataset) -> tuple[float, float]:
        self.test_loss.reset_state()
        self.test_accuracy.reset_state()
        # The iterator is made here, eagerly: made inside the tf.function, it would read
        # the dataset's options in graph mode, and TensorFlow warns about that in the run log.
        pipeline = [iter(dist_dataset)]
        self.test_pass(pipeline[0])
        inputs.drop_later(pipeline)
        return float(self.test_loss.result()), float(self.test_accuracy.result())

    def end_epoch(self) -> tuple[float, float]:
        """Close the epoch: return its train loss and accuracy and reset the counters."""
        examples = int(self.epoch_examples.numpy())
        loss = float(self.epoch_loss_sum.numpy()) / max(examples, 1)
        accuracy = float(self.train_accuracy.result())
        self.epoch_loss_sum.assign(0.0)
        self.epoch_examples.assign(0)
        self.train_accuracy.reset_state()
        self.epoch.assign_add(1)
        self.epoch_steps.assign(0)
        return loss, accuracy
