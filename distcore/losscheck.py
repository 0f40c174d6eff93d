"""Why the loss is divided by the global batch size, measured on one real batch.

For one global batch (of `global_batch` G, holding the first `examples` n test images, n < G
being a partial last batch) and a freshly initialised (seeded) model:
- `single_device`: the mean per-example loss, computed on one device, no strategy;
- `distributed`: each replica sums its per-example losses and divides by the number of
  examples in this global batch (n, an all-reduce of the replicas' counts); the strategy SUMs
  across replicas. This is distcore's training step;
- `tutorial_fixed_g`: the same, divided by the constant G, as the tutorial's
  `compute_average_loss(..., global_batch_size=GLOBAL_BATCH_SIZE)`: right for full batches,
  n/G too small for a partial one;
- `keras_default`: a Keras 3 loss with its default reduction ("sum_over_batch_size") called in
  the replica: Keras divides each replica's mean by the number of replicas (the tutorials said
  this reduction is refused under a strategy; Keras 3 allows it). Right only when every replica
  got the same number of examples; with an empty replica the strategy cannot even add the
  results up (None, and `keras_default_failure` says why);
- `mistake_reduce_mean`: each replica takes `reduce_mean` of its own examples,
  then SUM across replicas (off by about a factor of the replica count, and
  wrong in a different way when pieces differ in size);
- `mistake_keras_mean`: the replicas' scaled losses fed to a Keras `Mean` metric (total /
  number of replicas: too small by the replica count). A `Mean` fed the per-example losses,
  as the tutorial's `test_loss`, is right.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from . import data as data_lib, devices, inputs
from .config import MAX_SEED, TEST_SIZE, DistcoreError, check_int
from .model import create_model, forward

SUM = tf.distribute.ReduceOp.SUM


def loss_check(device_names, global_batch: int, seed: int = 0, data_dir=None, examples=None) -> dict:
    """One global batch's loss computed six ways on `device_names` (the reference on one device,
    `compute_average_loss` by this batch's example count, the tutorials' constant divisor, Keras 3's
    default reduction, and two classic mistakes). The batch is the first `examples` (default: all
    `global_batch`) test images; the model's initial weights come from `seed`. Returns plain values:
    each way's loss, its error against the reference, and the replicas' pieces."""
    # One batch of test images: more than the test set has would be a smaller batch than reported.
    try:
        global_batch = check_int("global batch size", global_batch, high=TEST_SIZE)
    except DistcoreError as err:  # training allows more: say why this check does not
        raise DistcoreError(f"{err} The loss check's batch is the first G of the {TEST_SIZE:,} test images.") from None
    examples = global_batch if examples is None else check_int("examples in the batch", examples, high=global_batch)
    seed = check_int("seed", seed, low=0, high=MAX_SEED)  # as training's (numpy's limit is 2**32 - 1)
    device_names = devices.resolve(devices=device_names)
    strategy = devices.make_strategy(device_names)
    data = data_lib.load(data_dir)
    images, labels = inputs.normalize(data.test_images[:examples], data.test_labels[:examples])
    with inputs.seeded(seed), strategy.scope():  # the initial weights of a training run with this seed
        model = create_model("cnn")
        mean_metric = keras.metrics.Mean()
    loss_object = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    keras_default = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    single = float(tf.reduce_mean(loss_object(labels, model(images, training=False))))

    def replica_fn(batch):
        x, y = batch
        logits = forward(model, x, training=False)
        per_example = loss_object(y, logits)
        count = tf.distribute.get_replica_context().all_reduce(SUM, tf.size(y))
        scaled = tf.nn.compute_average_loss(per_example, global_batch_size=count)
        fixed = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        mean_metric.update_state(scaled)
        # tf.reduce_mean of an empty replica's batch is NaN; div_no_nan mirrors what
        # the mistake looks like in practice (an empty replica adds nothing).
        wrong = tf.math.divide_no_nan(tf.reduce_sum(per_example), tf.cast(tf.size(per_example), tf.float32))
        return scaled, fixed, keras_default(y, logits), wrong, tf.size(y)

    dist = inputs.distribute(
        strategy,
        lambda: tf.data.Dataset.from_tensor_slices((images, labels)),
        global_batch=global_batch,
        api="dataset",
        policy="auto",
        drop_remainder=False,
        transform=None,
        prefetch=False,
    )
    batch = next(iter(dist))
    # In a tf.function, as the tutorial's distributed step (eagerly TensorFlow warns of its overhead).
    scaled, fixed, default, wrong, sizes = tf.function(lambda b: strategy.run(replica_fn, args=(b,)))(batch)
    result = {
        "global_batch": global_batch,
        "examples": examples,
        "replicas": len(device_names),
        "devices": list(device_names),
        "per_replica_examples": [int(s) for s in strategy.experimental_local_results(sizes)],
        "single_device": single,
        "distributed": float(strategy.reduce(SUM, scaled, axis=None)),
        "tutorial_fixed_g": float(strategy.reduce(SUM, fixed, axis=None)),
        **keras_default_sum(strategy, default),
        "mistake_reduce_mean": float(strategy.reduce(SUM, wrong, axis=None)),
        "mistake_keras_mean": float(mean_metric.result()),
    }
    for key in ("distributed", "tutorial_fixed_g", "keras_default", "mistake_reduce_mean", "mistake_keras_mean"):
        result[f"error_{key.removeprefix('mistake_')}"] = None if result[key] is None else abs(result[key] - single)
    return {**result, "explanation": EXPLANATION}


def keras_default_sum(strategy, per_replica) -> dict:
    """The SUM of Keras's default-reduction losses, or why there is none: an empty replica's
    "mean" is a tensor of shape (0,), which the strategy's reduction refuses to add."""
    try:
        return {"keras_default": float(strategy.reduce(SUM, per_replica, axis=None))}
    except tf.errors.InvalidArgumentError as err:
        reason = str(err).split("}}")[-1].split("[Op:")[0].strip()
        return {"keras_default": None, "keras_default_failure": f"InvalidArgumentError: {reason}"}


EXPLANATION = (
    "MirroredStrategy sums gradients (and here losses) across replicas. Dividing each replica's "
    "summed per-example loss by the number of examples in the whole global batch makes that sum "
    "equal the single-device mean. The tutorial divides by the constant GLOBAL_BATCH_SIZE, which is "
    "that number for every full batch but too large for a partial last one. Keras 3's default "
    "reduction divides each replica's mean by the number of replicas, as compute_average_loss "
    "without global_batch_size does: right only when the replicas got equal shares. "
    "reduce_mean per replica divides by the local batch instead, so the sum is about k x too "
    "large, k the number of replicas that got examples (an empty replica's reduce_mean is NaN in "
    "TensorFlow; here it adds 0); a Keras Mean over the replicas' scaled losses divides by the "
    "number of replicas again, so it is replicas x too small."
)
