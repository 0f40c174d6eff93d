"""The inner loop: a task's replica step, and N steps per `tf.function` call.

This module knows how to run steps, not when: the outer loop (controller.py)
decides how many steps to run, when to test, checkpoint, log and stop. What one
step does is the task's (tasks.py): the loop hands each replica its piece of the
batch and the step's global example count, and sums the replicas' metrics.

Losses follow the custom-training tutorial: per-example losses with no
reduction, summed and divided by the *global* batch size, so that summing the
replicas' gradients (what MirroredStrategy does) gives the gradient of the
global batch's mean loss. Current TensorFlow spells the tutorial's
`experimental_run_v2` as `run`, and Keras 3 losses take `reduction="none"`
instead of `Reduction.NONE`.
"""

from __future__ import annotations

import logging

import tensorflow as tf

from . import inputs, tasks
from .config import TrainConfig

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
    """A task's models and metrics, the loop's own state, and the compiled step loops, for one strategy."""

    def __init__(self, strategy, config: TrainConfig, task=None):
        self.strategy = strategy
        self.config = config
        self.task = task if task is not None else tasks.from_config(config)
        self.names = tasks.metric_names(self.task)
        # Same initial weights on any device set, and in any thread of a process.
        with inputs.seeded(config.seed), strategy.scope():
            self.task.build(config)
            only_first = tf.VariableAggregation.ONLY_FIRST_REPLICA
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, aggregation=only_first, name="step")
            # Where in the data the run is: completed epochs and steps into the current one.
            self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False, aggregation=only_first)
            self.epoch_steps = tf.Variable(0, dtype=tf.int64, trainable=False, aggregation=only_first)
            # The epoch's running sum of each metric x examples, and the example count, so a
            # resumed epoch reports the same train metrics as an uninterrupted one.
            self.epoch_sums = {
                name: tf.Variable(0.0, dtype=tf.float64, trainable=False, aggregation=only_first) for name in self.names
            }
            self.epoch_examples = tf.Variable(0, dtype=tf.int64, trainable=False, aggregation=only_first)
        self.test_batches = tf.Variable(0, dtype=tf.int64, trainable=False)  # host-side: not in checkpoints
        quiet_own_tracing()
        self.train_steps = tf.function(self._train_steps)
        self.test_pass = tf.function(self._test_pass)

    @property
    def model(self):  # the classifier's model (tests and the loss check read it)
        return self.task.model

    def checkpoint(self, random: bool = True) -> tf.train.Checkpoint:
        """The loop's state and the task's; `random`: with the states of the random layers'
        generators (Task.random_states), which older checkpoints lack."""
        sums = {f"epoch_{name}_sum": variable for name, variable in self.epoch_sums.items()}
        states = self.task.random_states() if random else {}
        return tf.train.Checkpoint(
            step=self.step,
            epoch=self.epoch,
            epoch_steps=self.epoch_steps,
            epoch_examples=self.epoch_examples,
            **sums,
            **self.task.checkpoint_items(),
            **({"random": tf.train.Checkpoint(**states)} if states else {}),
        )

    # --- replica context -------------------------------------------------------------

    def replica_train_step(self, batch, step):
        # The global batch size is the number of examples in this step across all
        # replicas: the configured G, except for a partial last batch. Dividing that
        # one by G would report (and train on) a loss scaled down by n/G.
        local = tf.shape(tf.nest.flatten(batch)[0])[0]
        global_batch = tf.distribute.get_replica_context().all_reduce(SUM, local)
        values = self.task.train_step(batch, tasks.StepContext(global_batch, local, step, self.config.seed))
        return tf.stack(tasks.step_values(self.task, values, self.names)), local

    def replica_test_step(self, batch, index):
        local = tf.shape(tf.nest.flatten(batch)[0])[0]
        global_batch = tf.distribute.get_replica_context().all_reduce(SUM, local)
        self.task.test_step(batch, tasks.StepContext(global_batch, local, index, self.config.seed))

    # --- cross-replica context ----------------------------------------------------------

    def _train_steps(self, iterator, num_steps):
        """Run up to `num_steps` steps; stop early, cleanly, when the iterator runs out.

        Returns each step's global metrics (steps x metrics) and example counts (host reads
        them once per call, not once per step).
        """
        values = tf.TensorArray(tf.float32, size=0, dynamic_size=True, element_shape=[len(self.names)])
        counts = tf.TensorArray(tf.int32, size=0, dynamic_size=True)
        done = tf.constant(0)
        for _ in tf.range(num_steps):
            optional = inputs.get_next_as_optional(self.strategy, iterator)
            if not optional.has_value():
                break
            step = self.step + tf.cast(done, tf.int64) + 1
            per_replica, per_replica_count = self.strategy.run(
                self.replica_train_step, args=(optional.get_value(), step)
            )
            value = self.strategy.reduce(SUM, per_replica, axis=None)
            count = self.strategy.reduce(SUM, per_replica_count, axis=None)
            values = values.write(done, value)
            counts = counts.write(done, count)
            weight = tf.cast(count, tf.float64)
            for i, name in enumerate(self.names):
                self.epoch_sums[name].assign_add(tf.cast(value[i], tf.float64) * weight)
            self.epoch_examples.assign_add(tf.cast(count, tf.int64))
            done += 1
        self.step.assign_add(tf.cast(done, tf.int64))
        self.epoch_steps.assign_add(tf.cast(done, tf.int64))
        return values.stack(), counts.stack()

    def _test_pass(self, iterator):
        self.test_batches.assign(0)
        for batch in iterator:  # each batch numbered, for tasks that draw random numbers per batch
            self.strategy.run(self.replica_test_step, args=(batch, self.test_batches.read_value()))
            self.test_batches.assign_add(1)

    # --- plain-Python views -------------------------------------------------------------

    def run_test(self, dist_dataset) -> dict:
        """The task's test metrics over `dist_dataset` ({"test_loss": ..., "test_accuracy": ...} for a classifier)."""
        self.task.reset_test()
        # The iterator is made here, eagerly: made inside the tf.function, it would read
        # the dataset's options in graph mode, and TensorFlow warns about that in the run log.
        pipeline = [iter(dist_dataset)]
        self.test_pass(pipeline[0])
        inputs.drop_later(pipeline)
        return self.task.test_results()

    def end_epoch(self) -> dict:
        """Close the epoch: return its train metrics ("train_<name>" means, and the task's own) and reset."""
        examples = max(int(self.epoch_examples.numpy()), 1)
        results = {f"train_{name}": float(var.numpy()) / examples for name, var in self.epoch_sums.items()}
        results.update(self.task.epoch_results())
        for var in self.epoch_sums.values():
            var.assign(0.0)
        self.epoch_examples.assign(0)
        self.task.reset_epoch()
        self.epoch.assign_add(1)
        self.epoch_steps.assign(0)
        return results
