"""Models: the tutorial CNN and the guide's MLP, optionally L2-penalised (optimizers: optimizer.py)."""

from __future__ import annotations

import functools

from .config import DistcoreError


def create_model(name: str = "cnn", l2: float = 0.0, keras_conv: bool = False):
    """A fresh, built Keras model taking (B, 28, 28, 1) float32 and returning 10 logits.

    Its convolutions are `Conv2D` below, which computes the same values as Keras's;
    `keras_conv=True` builds the model with `keras.layers.Conv2D` itself, as the
    tutorial's users write it (the benchmark's tutorial and Keras fit contenders).
    """
    import keras
    from keras import layers

    reg = keras.regularizers.L2(l2) if l2 else None
    conv = layers.Conv2D if keras_conv else _conv2d_class()
    if name == "cnn":  # the custom-training tutorial's network
        body = [
            conv(32, 3, activation="relu", kernel_regularizer=reg),
            layers.MaxPooling2D(),
            conv(64, 3, activation="relu", kernel_regularizer=reg),
            layers.MaxPooling2D(),
            layers.Flatten(),
            layers.Dense(64, activation="relu", kernel_regularizer=reg),
            layers.Dense(10, kernel_regularizer=reg),
        ]
    elif name == "mlp":  # "writing a training loop from scratch": 784-64-64-10
        body = [
            layers.Flatten(),
            layers.Dense(64, activation="relu", kernel_regularizer=reg),
            layers.Dense(64, activation="relu", kernel_regularizer=reg),
            layers.Dense(10, name="predictions", kernel_regularizer=reg),
        ]
    else:
        raise DistcoreError(f"model {name!r} must be one of: cnn, mlp.")
    return keras.Sequential([keras.Input(shape=(28, 28, 1)), *body], name=name)


def __getattr__(name):  # `distcore.model.Conv2D`, built on first use: importing distcore loads no Keras
    if name == "Conv2D":
        return _conv2d_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.cache
def _conv2d_class():
    """distcore's Conv2D: Keras's, except that a convolution of ONE input channel runs
    as the depthwise convolution it is.

    With one input channel, each of F filters sees that channel alone, which is what
    a depthwise convolution with depth multiplier F computes, with the same kernel
    shape (kh, kw, 1, F), variables, checkpoint keys and layer name. TensorFlow's
    CPU kernels run the depthwise form of the tutorial CNN's first layer (28x28x1 ->
    26x26x32, a shape the general convolution kernels handle poorly) faster; the
    values and gradients match to the last bit on 1 thread (docs/performance.md).
    """
    import keras

    @keras.saving.register_keras_serializable(package="distcore")
    class Conv2D(keras.layers.Conv2D):
        def convolution_op(self, inputs, kernel):
            if kernel.shape[2] != 1:
                return super().convolution_op(inputs, kernel)
            return keras.ops.depthwise_conv(
                inputs,
                kernel,
                strides=self.strides,
                padding=self.padding,
                data_format=self.data_format,
                dilation_rate=self.dilation_rate,
            )

    return Conv2D


def forward(model, images, training: bool):
    """The model's outputs for `images`, also when a replica's piece of the batch is empty.

    A partial global batch can leave a replica with no examples, and TensorFlow's
    oneDNN CPU kernels (its default on x86) fail on an empty batch inside a
    convolution ("input depth must be evenly divisible by filter depth"). The model
    then runs on one zero image whose row is dropped: no output, loss or gradient.
    """
    import tensorflow as tf

    count = tf.shape(images)[0]
    one_zero_image = lambda: tf.zeros(tf.concat([[1], tf.shape(images)[1:]], 0), images.dtype)  # noqa: E731
    return model(tf.cond(count > 0, lambda: images, one_zero_image), training=training)[:count]


def flops_per_example(model) -> int:
    """FLOPs of one training example, forward and backward (see `layer_flops`).
    The tutorial CNN: 5.06 MFLOP forward, 14.78 MFLOP in all."""
    return sum(flops for _, flops in layer_flops(model))


def layer_flops(model) -> list:
    """(layer, FLOPs per training example) for each Conv2D and Dense layer, in order.

    Forward: 2 x multiply-adds. Backward: the weight gradient costs as much again,
    and so does the gradient for the layer's input, except for the first layer,
    whose input (the image) needs no gradient. Pooling, activations, the loss and
    the optimizer update are comparatively tiny and not counted.
    """
    import keras

    counted = []
    for layer in model.layers:
        if isinstance(layer, keras.layers.Conv2D):
            _, h, w, c_out = layer.output.shape
            kh, kw, c_in, _ = layer.kernel.shape
            forward = 2 * h * w * c_out * kh * kw * c_in
        elif isinstance(layer, keras.layers.Dense):
            n_in, n_out = layer.kernel.shape
            forward = 2 * n_in * n_out
        else:
            continue
        counted.append((layer, forward * (3 if counted else 2)))
    return counted
