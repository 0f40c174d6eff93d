"""The inner loop: the tutorial's loss scaling makes every device set train alike."""

import warnings

import numpy as np
import pytest
import tensorflow as tf

from conftest import cpus, tf_warnings
from distcore import devices, inputs
from distcore.config import TrainConfig
from distcore.loop import StepRunner


def batch(fmnist, n, start=0):
    return fmnist.train_images[start : start + n], fmnist.train_labels[start : start + n]


def first_step(fmnist, replicas, n=64, global_batch=64, **overrides):
    """One step on the same global batch of n real images; returns (loss, count, weights)."""
    config = TrainConfig(devices=cpus(replicas), global_batch=global_batch, seed=3, **overrides)
    strategy = devices.make_strategy(config.devices)
    runner = StepRunner(strategy, config)
    images, labels = batch(fmnist, n)
    dist = inputs.distribute(
        strategy,
        lambda: inputs.in_memory(images, labels),
        global_batch=global_batch,
        api="dataset",
        policy="auto",
        drop_remainder=False,
    )
    losses, counts = runner.train_steps(inputs.train_iterator(strategy, dist), tf.constant(5))
    assert len(losses) == 1  # one batch in, one step out, then a clean stop
    return float(losses[0][0]), int(counts[0]), [v.numpy() for v in runner.model.trainable_variables]


def single_device_mean_loss(fmnist, n, **overrides):
    """The reference: the mean per-example loss of the same model before its first update."""
    config = TrainConfig(devices=cpus(1), seed=3, **overrides)
    runner = StepRunner(tf.distribute.get_strategy(), config)
    images, labels = inputs.normalize(*batch(fmnist, n))
    per_example = runner.task.loss_object(labels, runner.model(images, training=True))
    return float(tf.reduce_mean(per_example) + tf.add_n(runner.model.losses or [0.0]))


@pytest.mark.parametrize("optimizer,lr", [("sgd", 0.1), ("adam", 0.001)])
def test_first_step_agrees_across_1_2_and_4_replicas(fmnist, optimizer, lr):
    results = {r: first_step(fmnist, r, optimizer=optimizer, learning_rate=lr) for r in (1, 2, 4)}
    loss1, _, weights1 = results[1]
    assert loss1 == pytest.approx(single_device_mean_loss(fmnist, 64), rel=1e-5)
    for r in (2, 4):
        loss, count, weights = results[r]
        assert count == 64
        assert loss == pytest.approx(loss1, rel=1e-5)
        for w, w1 in zip(weights, weights1):
            np.testing.assert_allclose(w, w1, rtol=1e-4, atol=2e-6)
    # The update really happened (a test that compared two untouched models would pass too).
    fresh = StepRunner(tf.distribute.get_strategy(), TrainConfig(devices=cpus(1), seed=3))
    moved = max(float(np.abs(w - f.numpy()).max()) for w, f in zip(weights1, fresh.model.trainable_variables))
    assert moved > 1e-4


def test_uneven_split_over_3_replicas_still_agrees(fmnist):
    loss3, _, w3 = first_step(fmnist, 3, optimizer="sgd", learning_rate=0.1)  # 22 + 22 + 20
    loss1, _, w1 = first_step(fmnist, 1, optimizer="sgd", learning_rate=0.1)
    assert loss3 == pytest.approx(loss1, rel=1e-5)
    np.testing.assert_allclose(w3[0], w1[0], rtol=1e-4, atol=2e-6)


def test_partial_last_batch_is_divided_by_its_own_size(fmnist):
    """40 examples with G=64 over 4 replicas (16/16/8/0): the loss is the 40 examples' mean."""
    loss, count, _ = first_step(fmnist, 4, n=40)
    assert count == 40
    assert loss == pytest.approx(single_device_mean_loss(fmnist, 40), rel=1e-5)


@pytest.mark.parametrize("replicas,global_batch,n", [(3, 4, 4), (3, 4, 2), (2, 2, 1)], ids=["2+2+0", "1+1+0", "1+0"])
def test_replicas_with_no_examples_train_like_one_device(fmnist, replicas, global_batch, n):
    """Batches that leave a replica empty (G=4 on 3 replicas is cut 2+2+0, even when full):
    the CNN's oneDNN kernels fail on an empty batch, so the step must not hand them one,
    and the empty replicas add nothing."""
    loss, count, weights = first_step(
        fmnist, replicas, n=n, global_batch=global_batch, optimizer="sgd", learning_rate=0.1
    )
    loss1, _, weights1 = first_step(fmnist, 1, n=n, global_batch=global_batch, optimizer="sgd", learning_rate=0.1)
    assert count == n
    assert loss == pytest.approx(loss1, rel=1e-5)
    assert loss1 == pytest.approx(single_device_mean_loss(fmnist, n, optimizer="sgd", learning_rate=0.1), rel=1e-5)
    for w, w1 in zip(weights, weights1):
        np.testing.assert_allclose(w, w1, rtol=1e-4, atol=2e-6)


def test_l2_penalty_is_counted_once_whatever_the_replica_count(fmnist):
    overrides = dict(model="mlp", l2=0.01, optimizer="sgd", learning_rate=0.1)
    loss1, _, _ = first_step(fmnist, 1, **overrides)
    loss4, _, _ = first_step(fmnist, 4, **overrides)
    assert loss4 == pytest.approx(loss1, rel=1e-5)
    assert loss1 == pytest.approx(single_device_mean_loss(fmnist, 64, **overrides), rel=1e-5)
    plain, _, _ = first_step(fmnist, 1, model="mlp", optimizer="sgd", learning_rate=0.1)
    assert loss1 > plain  # the penalty is really in the loss


# Training's reader (several CPU replicas read on the host) and tf.distribute's iterator.
@pytest.mark.parametrize("reader", [inputs.train_iterator, lambda strategy, dist: iter(dist)])
def test_steps_per_call_stop_cleanly_at_the_end_of_the_data(fmnist, reader):
    config = TrainConfig(devices=cpus(2), global_batch=64, seed=3)
    strategy = devices.make_strategy(config.devices)
    runner = StepRunner(strategy, config)
    images, labels = batch(fmnist, 200)  # 3 full batches + 8
    dist = inputs.distribute(
        strategy,
        lambda: inputs.in_memory(images, labels),
        global_batch=64,
        api="dataset",
        policy="auto",
        drop_remainder=False,
    )
    iterator = reader(strategy, dist)
    losses, counts = runner.train_steps(iterator, tf.constant(10))
    assert counts.numpy().tolist() == [64, 64, 64, 8]
    assert int(runner.step.numpy()) == 4
    losses, counts = runner.train_steps(iterator, tf.constant(10))
    assert len(losses) == 0 and int(runner.step.numpy()) == 4


def test_test_pass_sees_every_example_and_warns_nothing(fmnist):
    config = TrainConfig(devices=cpus(2), global_batch=64, seed=3)
    strategy = devices.make_strategy(config.devices)
    runner = StepRunner(strategy, config)
    images, labels = fmnist.test_images[:200], fmnist.test_labels[:200]  # 3 full batches + 8
    dist = inputs.distribute(
        strategy,
        lambda: inputs.in_memory(images, labels),
        global_batch=64,
        api="dataset",
        policy="auto",
        drop_remainder=False,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tested = runner.run_test(dist)
        loss, accuracy = tested["test_loss"], tested["test_accuracy"]
    # TensorFlow warns when a distributed dataset is iterated inside a tf.function (it reads the
    # dataset's options in graph mode); no run's log shows that warning.
    assert not [w for w in caught if "tf.data options" in str(w.message)]
    logits = runner.model(inputs.normalize(images, labels)[0], training=False).numpy()
    # The pass runs 2 replicas of 32 (and 4 + 4), the reference one batch of 200: a prediction whose top two
    # logits tie to within float32 rounding may go either way, one of the 200 (+0.5 for the quotient). A
    # missed example shows in the loss below, which every example moves by far more than rel=1e-5.
    assert accuracy == pytest.approx(float(np.mean(logits.argmax(axis=1) == labels)), abs=1.5 / 200)
    per_example = runner.task.loss_object(labels.astype("int32"), logits)
    assert loss == pytest.approx(float(tf.reduce_mean(per_example)), rel=1e-5)


def test_each_new_runner_traces_its_own_step_without_a_retracing_warning(fmnist):
    # A notebook's fifth Controller drew TensorFlow's "triggered tf.function retracing" warning:
    # it counts traces by the function's code, across every StepRunner's own functions.
    with tf_warnings() as seen:
        for _ in range(7):
            first_step(fmnist, 2, n=8, global_batch=8)
        tf.get_logger().warning(  # (a warning about another function still passes)
            "7 out of the last 7 calls to <function f at 0x1> triggered tf.function retracing."
        )
    assert [m for m in seen if "retracing" in m] == [
        "7 out of the last 7 calls to <function f at 0x1> triggered tf.function retracing."
    ]
