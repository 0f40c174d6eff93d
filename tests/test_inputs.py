"""Input pipelines: what each replica is fed."""

import stat

import numpy as np
import pytest
import tensorflow as tf

from conftest import cpus, training_pieces
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


def test_the_tfrecord_cache_belongs_to_the_data_it_was_written_from(tmp_path, monkeypatch):
    # Two datasets of the same size: before, the second trained on the first one's records.
    monkeypatch.setenv("DISTCORE_CACHE_DIR", str(tmp_path))
    rng = np.random.default_rng(0)

    class Data:
        def __init__(self, images):
            self.train_images, self.train_labels = images, np.arange(len(images), dtype=np.uint8) % 10

    first = Data(rng.integers(0, 256, (40, 28, 28), dtype=np.uint8))
    second = Data(255 - first.train_images)
    read = [
        np.array([image for image, _ in inputs.from_records(inputs.train_records(d, 40)).as_numpy_iterator()])
        for d in (first, second, Data(first.train_images.copy()))
    ]
    assert (read[0] == first.train_images).all() and (read[1] == second.train_images).all()
    assert inputs.train_records(first, 40) == inputs.train_records(Data(first.train_images.copy()), 40)
    assert len(list(tmp_path.iterdir())) == 2  # the same content is written once


def test_an_unusable_cache_dir_is_named_as_set_or_not(fmnist, tmp_path, monkeypatch):
    # When DISTCORE_CACHE_DIR is set (to the folder that failed), the error says so, not "; set DISTCORE_CACHE_DIR."
    from distcore import data
    from distcore.config import DistcoreError

    afile = tmp_path / "afile"
    afile.write_text("")
    few = data.subset(fmnist, 16, 16)
    monkeypatch.setenv("DISTCORE_CACHE_DIR", str(afile))
    with pytest.raises(DistcoreError) as caught:
        inputs.train_records(few, 16)
    assert str(caught.value).startswith(f"cannot write the TFRecord cache in {afile}/fashion-mnist-train-16-")
    assert str(caught.value).endswith(
        f"(Not a directory); DISTCORE_CACHE_DIR is set to '{afile}': point it to a folder you can write."
    )
    monkeypatch.delenv("DISTCORE_CACHE_DIR")
    monkeypatch.setenv("HOME", str(afile))  # the default, ~/.cache/distcore
    with pytest.raises(
        DistcoreError, match=r"\(Not a directory\); set DISTCORE_CACHE_DIR to a folder you can write\.$"
    ):
        inputs.train_records(few, 16)
    # In an ASCII locale a cache path read as surrogates is refused with a message, not a traceback, rc 1.
    monkeypatch.setenv("DISTCORE_CACHE_DIR", str(tmp_path / "ca \udcff"))  # the byte 0xff, not UTF-8
    with pytest.raises(
        DistcoreError,
        match=r"^the TFRecord cache .*ca \\udcff/fashion-mnist-train-16-\w+ is not "
        r"UTF-8 text as this process read it",
    ):
        inputs.train_records(few, 16)


def test_a_cache_dir_distcore_makes_is_open_to_every_user_as_tmp_is(fmnist, tmp_path, monkeypatch):
    # The image's DISTCORE_CACHE_DIR, made by its first user, is writable by every other user of
    # the container (`docker run --user`), for each training-set size not cached yet.
    from distcore import data

    few = data.subset(fmnist, 16, 16)
    shared = tmp_path / "made" / "cache"
    monkeypatch.setenv("DISTCORE_CACHE_DIR", str(shared))
    inputs.train_records(few, 16)
    assert stat.S_IMODE(shared.stat().st_mode) == 0o1777  # sticky: none removes another's cache
    assert stat.S_IMODE((tmp_path / "made").stat().st_mode) != 0o1777  # only the folder named
    own = tmp_path / "own"
    own.mkdir(mode=0o700)
    monkeypatch.setenv("DISTCORE_CACHE_DIR", str(own))
    inputs.train_records(few, 16)
    assert stat.S_IMODE(own.stat().st_mode) == 0o700  # a folder the user made keeps its mode


def tensorflows_pieces(strategy, dist):
    return [
        [tf.nest.map_structure(lambda t: t.numpy().tolist(), piece) for piece in strategy.experimental_local_results(x)]
        for x in dist
    ]


# Seed tables of the distributed-input guide, partial and uneven batches, both rebatches
# (a pipeline ending at batch() with AUTO/DATA gets the legacy one), and the function API.
@pytest.mark.parametrize(
    "n,g,r,api,policy,mapped,drop",
    [
        (6, 4, 2, "dataset", "auto", False, False),
        (4, 4, 5, "dataset", "auto", False, False),
        (8, 4, 3, "dataset", "auto", False, False),
        (1000, 64, 3, "dataset", "auto", False, False),
        (1000, 64, 3, "dataset", "off", False, False),
        (1000, 64, 3, "dataset", "data", True, False),
        (1000, 64, 3, "dataset", "off", True, False),
        (200, 64, 4, "dataset", "auto", True, False),
        (200, 64, 4, "dataset", "auto", True, True),
        (200, 60, 3, "function", "auto", True, False),
        (200, 64, 2, "function", "off", False, True),
    ],
)
@pytest.mark.slow
def test_several_cpu_replicas_read_on_the_host_the_pieces_tensorflow_hands_out(n, g, r, api, policy, mapped, drop):
    strategy = devices.make_strategy(cpus(r))

    def ids():
        return tf.data.Dataset.range(n).map(lambda i: (i, -i))

    dist = inputs.distribute(
        strategy,
        ids,
        global_batch=g,
        api=api,
        policy=policy,
        drop_remainder=drop,
        transform=(lambda x, y: (x * 1, y)) if mapped else None,
        prefetch=mapped,
    )
    assert isinstance(inputs.train_iterator(strategy, dist), inputs.HostFeed)
    got, want = training_pieces(strategy, dist), tensorflows_pieces(strategy, dist)
    assert got == want
    every = list(range(n // g * g if drop else n))
    assert sorted(i for step in got for x, _ in step for i in x) == every


@pytest.mark.slow
def test_the_loop_reads_training_pieces_of_fashion_images_on_the_host(fmnist):
    strategy = devices.make_strategy(cpus(2))

    def make():
        return inputs.in_memory(fmnist.train_images[:200], fmnist.train_labels[:200], seed=5, epoch=1)

    dist = inputs.distribute(strategy, make, global_batch=64, api="dataset", policy="auto", drop_remainder=False)
    got, want = training_pieces(strategy, dist), tensorflows_pieces(strategy, dist)
    assert [[len(y) for _, y in step] for step in got] == [[32, 32], [32, 32], [32, 32], [4, 4]]
    assert got == want
    assert not inputs.several_cpu_replicas(devices.make_strategy(cpus(1)))  # it reads a plain iterator anyway
