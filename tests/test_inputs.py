"""Input pipelines: what each replica is fed."""

import numpy as np
import pytest

from conftest import cpus
from distcore import devices, inputs


@pytest.mark.parametrize("api", ["dataset", "function"])
def test_one_cpu_replica_gets_the_tutorials_batches_from_a_plain_iterator(fmnist, api):
    strategy = devices.make_strategy(cpus(1))
    images, labels = fmnist.train_images[:200], fmnist.train_labels[:200]  # 3 full batches and 8 left over

    def make():
        return inputs.in_memory(images, labels, seed=5, epoch=1)

    ours = inputs.distribute(strategy, make, global_batch=64, api=api, policy="auto", drop_remainder=False)
    tutorial = strategy.experimental_distribute_dataset(make().batch(64).map(inputs.normalize))

    def batches(dist):
        out = []
        for x, y in dist:
            (x,), (y,) = strategy.experimental_local_results(x), strategy.experimental_local_results(y)
            out.append((x.numpy(), y.numpy()))
        return out

    got, want = batches(ours), batches(tutorial)
    assert [len(y) for _, y in got] == [64, 64, 64, 8]
    for (gx, gy), (wx, wy) in zip(got, want, strict=True):
        np.testing.assert_array_equal(gx, wx)
        np.testing.assert_array_equal(gy, wy)
    # What makes it cheaper: tf.distribute hands the one replica a plain tf.data iterator.
    inner = iter(ours)._iterators[0]._iterator
    assert "MultiDevice" not in type(inner).__name__
    assert "MultiDevice" in type(iter(tutorial)._iterators[0]._iterator).__name__


def test_two_replicas_keep_the_distributed_split():
    strategy = devices.make_strategy(cpus(2))
    assert not inputs.one_cpu_replica(strategy)
    assert inputs.one_cpu_replica(devices.make_strategy(cpus(1)))
