"""The tutorial CNN: distcore's Conv2D computes what Keras's does, and reads its checkpoints."""

import re

import keras
import numpy as np
import tensorflow as tf

from distcore import inputs
from distcore.model import Conv2D, create_model, flops_per_example, layer_flops
from distcore.optimizer import create_optimizer


def both_models(seed=5):
    """distcore's CNN and the same CNN built from keras.layers.Conv2D, same seed."""
    keras.utils.set_random_seed(seed)
    ours = create_model("cnn")
    keras.utils.set_random_seed(seed)
    theirs = create_model("cnn", keras_conv=True)
    return ours, theirs


def names(items):
    """Layer or variable names without Keras's per-process counter ("conv2d_3" -> "conv2d")."""
    return [re.sub(r"_\d+$", "", item.name) for item in items]


def op_types(model):
    graph = tf.function(model).get_concrete_function(tf.TensorSpec([None, 28, 28, 1])).graph
    return [op.type for op in graph.get_operations()]


def test_only_the_one_channel_convolution_runs_as_a_depthwise_one():
    ours, theirs = both_models()
    assert isinstance(ours.layers[0], Conv2D) and not isinstance(theirs.layers[0], Conv2D)
    for model, expected in ((ours, (1, 1)), (theirs, (0, 2))):
        ops = op_types(model)  # one trace each
        assert (ops.count("DepthwiseConv2dNative"), ops.count("Conv2D")) == expected
    # The same layers, names, variables and initial values: only the kernel that runs differs.
    assert names(ours.layers) == names(theirs.layers)
    assert names(ours.weights) == names(theirs.weights)
    for a, b in zip(ours.weights, theirs.weights):
        assert a.shape == b.shape
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert flops_per_example(ours) == flops_per_example(theirs) == 14_778_624  # docs/performance.md: 14.78 MFLOP


def test_layer_flops_count_forward_and_backward():
    """2 FLOPs per multiply-add, forward; backward twice that, but once for the first layer,
    whose input (the image) needs no gradient."""
    model = create_model("cnn")
    counted = layer_flops(model)
    assert names(layer for layer, _ in counted) == ["conv2d", "conv2d", "dense", "dense"]
    assert [flops for _, flops in counted] == [
        2 * (26 * 26 * 32 * 3 * 3 * 1) * 2,  # 28x28x1 -> 26x26x32, no input gradient
        2 * (11 * 11 * 64 * 3 * 3 * 32) * 3,  # 13x13x32 -> 11x11x64
        2 * (1600 * 64) * 3,
        2 * (64 * 10) * 3,
    ]
    assert sum(flops for _, flops in counted) == flops_per_example(model)


def test_trains_like_keras_conv2d(fmnist):
    """Six Adam steps on real images: the same outputs, losses and weights as Keras's layers."""
    images, labels = inputs.normalize(fmnist.train_images[:384], fmnist.train_labels[:384])
    loss_object = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    results = []
    for model in both_models():
        optimizer = create_optimizer("adam", 0.001)
        optimizer.build(model.trainable_variables)

        @tf.function
        def step(x, y, model=model, optimizer=optimizer):
            with tf.GradientTape() as tape:
                loss = loss_object(y, model(x, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        first_logits = model(images[:64]).numpy()
        losses = [float(step(images[i : i + 64], labels[i : i + 64])) for i in range(0, 384, 64)]
        results.append((first_logits, losses, [w.numpy() for w in model.weights]))
    (logits, losses, weights), (keras_logits, keras_losses, keras_weights) = results
    np.testing.assert_allclose(logits, keras_logits, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(losses, keras_losses, rtol=1e-5)
    assert losses[-1] < losses[0]  # it does train
    for ours, theirs in zip(weights, keras_weights):
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-6)


def test_restores_a_checkpoint_written_with_keras_conv2d(tmp_path, fmnist):
    """Runs saved before distcore had its own Conv2D still restore, value for value."""
    ours, theirs = both_models(seed=6)
    keras.utils.set_random_seed(7)
    theirs.layers[0].kernel.assign(tf.random.normal([3, 3, 1, 32]))  # differ from ours' initial values
    path = tf.train.Checkpoint(model=theirs).write(str(tmp_path / "ckpt"))
    tf.train.Checkpoint(model=ours).read(path).assert_consumed()
    images, _ = inputs.normalize(fmnist.test_images[:32], fmnist.test_labels[:32])
    np.testing.assert_allclose(ours(images).numpy(), theirs(images).numpy(), rtol=1e-5, atol=1e-6)
