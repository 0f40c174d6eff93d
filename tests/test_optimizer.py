"""FusedAdam: Keras 3's Adam, applied with one fused ResourceApplyAdam per variable."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import cpus
from distcore import devices, inputs
from distcore.model import create_model
from distcore.optimizer import FusedAdam, create_optimizer


def train(strategy, optimizer_class, images, labels, steps=4, batch=64):
    """`steps` steps of the CNN on real images; returns (losses, model, optimizer, step function)."""
    keras.utils.set_random_seed(7)
    with strategy.scope():
        model = create_model("cnn")
        optimizer = optimizer_class(learning_rate=0.001)
        optimizer.build(model.trainable_variables)
    loss_object = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(loss_object(y, model(x, training=True)), global_batch_size=batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    @tf.function
    def step(x, y):
        return strategy.reduce("SUM", strategy.run(replica_step, args=(x, y)), axis=None)

    dataset = tf.data.Dataset.from_tensor_slices(inputs.normalize(images, labels)).batch(batch).take(steps)
    losses = [float(step(x, y)) for x, y in strategy.experimental_distribute_dataset(dataset)]
    return losses, model, optimizer, step


@pytest.mark.parametrize("replicas", [1, 2])
def test_fused_adam_trains_like_keras_adam(fmnist, replicas):
    strategy = devices.make_strategy(cpus(replicas))
    images, labels = fmnist.train_images[:256], fmnist.train_labels[:256]
    keras_losses, keras_model, keras_opt, _ = train(strategy, keras.optimizers.Adam, images, labels)
    fused_losses, fused_model, fused_opt, _ = train(strategy, FusedAdam, images, labels)
    np.testing.assert_allclose(fused_losses, keras_losses, rtol=1e-5)
    assert fused_losses[-1] < fused_losses[0]  # it does train
    for ours, theirs in zip(fused_model.weights, keras_model.weights):
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-4, atol=1e-6)
    for ours, theirs in zip(fused_opt.variables, keras_opt.variables):  # iterations, m and v of each weight
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-4, atol=1e-7)
    assert int(fused_opt.iterations.numpy()) == 4


def test_each_replica_updates_each_variable_with_one_fused_kernel(fmnist):
    strategy = devices.make_strategy(cpus(2))
    _, model, _, step = train(strategy, create_optimizer, fmnist.train_images[:64], fmnist.train_labels[:64], steps=1)
    x, y = inputs.normalize(fmnist.train_images[:64], fmnist.train_labels[:64])
    graph = step.get_concrete_function(x, y).graph
    op_types = [op.type for op in graph.get_operations()]
    assert op_types.count("ResourceApplyAdam") == 2 * len(model.trainable_variables)
    assert "AssignSubVariableOp" not in op_types  # Keras 3's unfused update's last op


def test_checkpoint_written_with_keras_adam_restores_into_fused_adam(fmnist, tmp_path):
    strategy = devices.make_strategy(cpus(2))
    images, labels = fmnist.train_images[:128], fmnist.train_labels[:128]
    _, keras_model, keras_opt, _ = train(strategy, keras.optimizers.Adam, images, labels, steps=2)
    path = tf.train.Checkpoint(model=keras_model, optimizer=keras_opt).write(str(tmp_path / "ckpt"))
    _, fused_model, fused_opt, _ = train(strategy, FusedAdam, images[:64], labels[:64], steps=0)
    tf.train.Checkpoint(model=fused_model, optimizer=fused_opt).read(path).assert_existing_objects_matched()
    assert int(fused_opt.iterations.numpy()) == 2
    for ours, theirs in zip(fused_opt.variables, keras_opt.variables):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_amsgrad_falls_back_to_keras_update(fmnist):
    strategy = devices.make_strategy(cpus(1))
    images, labels = fmnist.train_images[:128], fmnist.train_labels[:128]
    keras_losses, *_ = train(strategy, lambda **kw: keras.optimizers.Adam(amsgrad=True, **kw), images, labels, steps=2)
    fused_losses, *_ = train(strategy, lambda **kw: FusedAdam(amsgrad=True, **kw), images, labels, steps=2)
    assert fused_losses == keras_losses


def test_unknown_optimizer_is_refused():
    from distcore.config import DistcoreError

    with pytest.raises(DistcoreError, match="adam, sgd"):
        create_optimizer("lbfgs")


def test_fused_adam_is_tf_keras_2s_adam_whose_one_minus_beta_is_float32():
    # The losses drift from Keras 3's Adam over tens of steps (1e-2 by step 30). The fused
    # kernel, as tf.keras 2's Adam (the seeds'), computes 1 - beta_2 in float32 (0.00099998713);
    # Keras 3 rounds it from Python's double (0.001). That is the only difference: v after one
    # step, the same gradient, is exactly each formula's.
    grad = tf.constant([0.5, -2.0, 3.0e-3], tf.float32)
    slots = {}
    for name, optimizer in (
        ("fused", FusedAdam(learning_rate=0.001)),
        ("keras", keras.optimizers.Adam(learning_rate=0.001)),
    ):
        variable = keras.Variable(tf.zeros([3]))
        optimizer.build([variable])
        optimizer.apply_gradients([(grad, variable)])
        slots[name] = optimizer._velocities[0].numpy()
    g2 = np.square(grad.numpy())
    np.testing.assert_array_equal(slots["fused"], g2 * (np.float32(1) - np.float32(0.999)))
    np.testing.assert_array_equal(slots["keras"], g2 * np.float32(1 - 0.999))
    assert np.float32(1) - np.float32(0.999) == np.float32(0.00099998713)
    np.testing.assert_allclose(slots["fused"] / slots["keras"], 0.99998713, rtol=1e-7)
