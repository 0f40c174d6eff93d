"""Optimizers: Adam applied with TensorFlow's fused kernel, and plain SGD.

Keras 3's Adam updates each variable with about ten separate element-wise ops
(subtract, multiply, square, sqrt, divide, three assigns), each a full pass over
the variable. tf.keras 2, the Keras of the seed tutorials, applied Adam with one
fused kernel per variable, `ResourceApplyAdam`. `FusedAdam` does that again: the
same formula (Keras 3's `alpha = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t)`,
epsilon added to `sqrt(v)`), the same slot variables and checkpoint keys, in
about 40% of the time: a tf.profiler trace of the tutorial CNN's step on the
2-core benchmark machine shows 0.61-0.75 ms of optimizer ops per step instead
of 1.66-1.86 ms (1 replica, 2 threads).
"""

from __future__ import annotations

import keras
import tensorflow as tf

from .config import DistcoreError


def _handle(variable):
    """The resource handle of a Keras or TensorFlow variable. Inside a strategy's
    `extended.update` (where Keras calls `update_step`), a mirrored variable's handle
    is the current device's copy."""
    return (variable.value if isinstance(variable, keras.Variable) else variable).handle


class FusedAdam(keras.optimizers.Adam):
    """keras.optimizers.Adam whose update is one `ResourceApplyAdam` per variable."""

    def update_step(self, gradient, variable, learning_rate):
        if self.amsgrad:  # the fused kernel has no AMSGrad
            return super().update_step(gradient, variable, learning_rate)
        dtype = variable.dtype
        step = tf.cast(self.iterations + 1, dtype)
        index = self._get_variable_index(variable)
        tf.raw_ops.ResourceApplyAdam(
            var=_handle(variable),
            m=_handle(self._momentums[index]),
            v=_handle(self._velocities[index]),
            beta1_power=tf.pow(tf.cast(self.beta_1, dtype), step),
            beta2_power=tf.pow(tf.cast(self.beta_2, dtype), step),
            lr=tf.cast(learning_rate, dtype),
            beta1=tf.cast(self.beta_1, dtype),
            beta2=tf.cast(self.beta_2, dtype),
            epsilon=tf.cast(self.epsilon, dtype),
            grad=tf.cast(tf.convert_to_tensor(gradient), dtype),
        )


def create_optimizer(name: str = "adam", learning_rate: float = 0.001):
    if name == "adam":
        return FusedAdam(learning_rate=learning_rate)
    if name == "sgd":
        return keras.optimizers.SGD(learning_rate=learning_rate)
    raise DistcoreError(f"optimizer {name!r} must be one of: adam, sgd.")
