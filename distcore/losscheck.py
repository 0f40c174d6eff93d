"""Why the loss is divided by the global batch size, measured on one real batch.

For one global batch of test images and a freshly initialised (seeded) model:
- `single_device`: the mean per-example loss, computed on one device, no strategy;
- `distributed`: each replica sums its per-example losses and divides by the
  global batch size; the strategy SUMs across replicas (the tutorial's way);
- `mistake_reduce_mean`: each replica takes `reduce_mean` of its own examples,
  then SUM across replicas (off by about a factor of the replica count, and
  wrong in a different way when pieces differ in size);
- `mistake_keras_mean`: the scaled per-replica losses averaged by a Keras
  `Mean` metric (total / number of replicas: too small by the replica count).
"""

from __future__ import annotations

import keras
import tensorflow as tf

from . import data as data_lib, devices, inputs
from .config import MAX_SEED, TEST_SIZE, check_int
from .model import create_model, forward

SUM = tf.distribute.ReduceOp.SUM


def loss_check(device_names, global_batch: int, seed: int = 0, data_dir=None) -> dict:
    # One batch of test images: more than the test set has would be a smaller batch than reported.
    global_batch = check_int("global batch size", global_batch, high=TEST_SIZE)
    seed = check_int("seed", seed, low=0, high=MAX_SEED)  # as training's (numpy's limit is 2**32 - 1)
    device_names = devices.resolve(devices=device_names)
    strategy = devices.make_strategy(device_names)
    data = data_lib.load(data_dir)
    images, labels = inputs.normalize(data.test_images[:global_batch], data.test_labels[:global_batch])
    inputs.seed_everything(seed)  # the initial weights of a training run with this seed
    with strategy.scope():
        model = create_model("cnn")
        mean_metric = keras.metrics.Mean()
    loss_object = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    single = float(tf.reduce_mean(loss_object(labels, model(images, training=False))))

    def replica_fn(batch):
        x, y = batch
        per_example = loss_object(y, forward(model, x, training=False))
        scaled = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        mean_metric.update_state(scaled)
        # tf.reduce_mean of an empty replica's batch is NaN; div_no_nan mirrors what
        # the mistake looks like in practice (an empty replica adds nothing).
        wrong = tf.math.divide_no_nan(tf.reduce_sum(per_example), tf.cast(tf.size(per_example), tf.float32))
        return scaled, wrong, tf.size(y)

    dist = inputs.distribute(strategy, lambda: tf.data.Dataset.from_tensor_slices((images, labels)),
                             global_batch=global_batch, api="dataset", policy="auto",
                             drop_remainder=False, transform=None, prefetch=False)
    batch = next(iter(dist))
    # In a tf.function, as the tutorial's distributed step (eagerly TensorFlow warns of its overhead).
    scaled, wrong, sizes = tf.function(lambda b: strategy.run(replica_fn, args=(b,)))(batch)
    distributed = float(strategy.reduce(SUM, scaled, axis=None))
    reduce_mean = float(strategy.reduce(SUM, wrong, axis=None))
    keras_mean = float(mean_metric.result())
    return {
        "global_batch": global_batch,
        "replicas": len(device_names),
        "devices": list(device_names),
        "per_replica_examples": [int(s) for s in strategy.experimental_local_results(sizes)],
        "single_device": single,
        "distributed": distributed,
        "mistake_reduce_mean": reduce_mean,
        "mistake_keras_mean": keras_mean,
        "error_distributed": abs(distributed - single),
        "error_reduce_mean": abs(reduce_mean - single),
        "error_keras_mean": abs(keras_mean - single),
        "explanation": (
            "MirroredStrategy sums gradients (and here losses) across replicas. Dividing each "
            "replica's summed per-example loss by the global batch size makes that sum equal the "
            "single-device mean. reduce_mean per replica divides by the local batch instead, so the "
            "sum is about k x too large, k the number of replicas that got examples (an empty "
            "replica's reduce_mean is NaN in TensorFlow; here it adds 0); a Keras Mean over the "
            "replicas' scaled losses divides by the number of replicas again, so it is replicas x too small."
        ),
    }
