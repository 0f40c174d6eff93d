"""Models and optimizers: the tutorial CNN and the guide's MLP, optionally L2-penalised."""

from __future__ import annotations

from .config import DistcoreError


def create_model(name: str = "cnn", l2: float = 0.0):
    """A fresh, built Keras model taking (B, 28, 28, 1) float32 and returning 10 logits."""
    import keras
    from keras import layers

    reg = keras.regularizers.L2(l2) if l2 else None
    if name == "cnn":  # the custom-training tutorial's network
        body = [
            layers.Conv2D(32, 3, activation="relu", kernel_regularizer=reg),
            layers.MaxPooling2D(),
            layers.Conv2D(64, 3, activation="relu", kernel_regularizer=reg),
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


def create_optimizer(name: str = "adam", learning_rate: float = 0.001):
    import keras

    if name == "adam":
        return keras.optimizers.Adam(learning_rate=learning_rate)
    if name == "sgd":
        return keras.optimizers.SGD(learning_rate=learning_rate)
    raise DistcoreError(f"optimizer {name!r} must be one of: adam, sgd.")


def flops_per_example(model) -> int:
    """Forward multiply-adds x 2 for Conv2D and Dense layers, x 3 for forward + backward."""
    import keras

    flops = 0
    for layer in model.layers:
        if isinstance(layer, keras.layers.Conv2D):
            _, h, w, c_out = layer.output.shape
            kh, kw, c_in, _ = layer.kernel.shape
            flops += 2 * h * w * c_out * kh * kw * c_in
        elif isinstance(layer, keras.layers.Dense):
            n_in, n_out = layer.kernel.shape
            flops += 2 * n_in * n_out
    return 3 * flops
