"""tf.data input pipelines and the two ways to distribute them.

- `experimental_distribute_dataset`: we batch by the *global* batch size and
  TensorFlow rebatches each global batch into per-replica pieces, sharding
  between workers by the `AutoShardPolicy` set in the dataset's options.
- `distribute_datasets_from_function`: TensorFlow calls our function once per
  input pipeline with an `InputContext`; we shard and batch by the
  *per-replica* batch size ourselves.

With one CPU replica both become `distribute_datasets_from_function` with
PER_REPLICA input kept on the host: the same batches, from a plain iterator.

Training on several CPU replicas in one process reads TensorFlow's own per-worker
dataset (already rebatched and sharded) with one host iterator, `replicas` elements a
step (`train_iterator`): the pieces `tf.distribute`'s iterator hands out, without its
per-device pipelines.

Images stay uint8 until after batching (a quarter of the memory and one map per
batch, not per example); normalisation to [0, 1] float32 happens in the pipeline.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import threading
from pathlib import Path

import numpy as np
import tensorflow as tf

from . import settings
from .config import DistcoreError, check_utf8_path
from .data import home_folder

POLICY = {
    "auto": tf.data.experimental.AutoShardPolicy.AUTO,
    "file": tf.data.experimental.AutoShardPolicy.FILE,
    "data": tf.data.experimental.AutoShardPolicy.DATA,
    "off": tf.data.experimental.AutoShardPolicy.OFF,
}
RECORD_SHARDS = 8


def with_policy(dataset: tf.data.Dataset, policy: str) -> tf.data.Dataset:
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = POLICY[policy]
    options.deterministic = True
    return dataset.with_options(options)


def normalize(images, labels):
    """uint8 (B, 28, 28) -> float32 (B, 28, 28, 1) in [0, 1]; runs once per batch."""
    images = tf.cast(images, tf.float32) * (1.0 / 255.0)
    return images[..., tf.newaxis], tf.cast(labels, tf.int32)


def scale_and_cast(x, y):
    """A user's arrays: uint8 scaled to [0, 1] as images are, anything else cast to float32 as it is;
    class labels (integers) to int32, real-valued targets (floats) to float32."""
    x = tf.cast(x, tf.float32) * (1.0 / 255.0) if x.dtype == tf.uint8 else tf.cast(x, tf.float32)
    return x, tf.cast(y, tf.int32 if tf.as_dtype(y.dtype).is_integer else tf.float32)


def transform_for(examples):
    """The per-batch map for `examples`: the built-in datasets' normalize (which adds the channel
    axis), or scale_and_cast for a user's arrays, whose shape is the user's model's."""
    return normalize if getattr(examples, "channel", True) else scale_and_cast


def distribute(
    strategy,
    make_examples,
    *,
    global_batch: int,
    api: str,
    policy: str,
    drop_remainder: bool,
    transform=normalize,
    prefetch: bool = True,
):
    """Distribute the examples that `make_examples()` yields (an unbatched dataset).

    `make_examples` is a function so the `function` API can build one pipeline per
    input worker; `transform` (or None) maps each batch. Returns a
    `tf.distribute.DistributedDataset`.
    """

    def finish(ds, batch):
        ds = ds.batch(batch, drop_remainder=drop_remainder)
        if transform is not None:
            ds = ds.map(transform, num_parallel_calls=tf.data.AUTOTUNE)
        return ds.prefetch(tf.data.AUTOTUNE) if prefetch else ds

    if one_cpu_replica(strategy):
        # One replica in one process gets every example whichever way the data is
        # distributed. PER_REPLICA input that stays on the host hands it a plain tf.data
        # iterator instead of a MultiDeviceIterator, which made a 1-replica CPU step up to
        # 9% slower in paired runs (docs/performance.md).
        options = tf.distribute.InputOptions(
            experimental_replication_mode=tf.distribute.InputReplicationMode.PER_REPLICA,
            experimental_fetch_to_device=False,
        )
        return strategy.distribute_datasets_from_function(
            lambda context: with_policy(finish(make_examples(), global_batch), policy), options
        )

    if api == "dataset":
        return strategy.experimental_distribute_dataset(with_policy(finish(make_examples(), global_batch), policy))

    def dataset_fn(context: tf.distribute.InputContext):
        per_replica = context.get_per_replica_batch_size(global_batch)
        ds = make_examples().shard(context.num_input_pipelines, context.input_pipeline_id)
        return finish(ds, per_replica)

    return strategy.distribute_datasets_from_function(dataset_fn)


class HostFeed(tf.experimental.ExtensionType):
    """One input worker's dataset read on the host, `replicas` consecutive elements a step.

    An ExtensionType, so a tf.function taking it traces once for every epoch's iterator.
    """

    iterator: tf.data.Iterator
    replicas: int


def train_iterator(strategy, dist):
    """The iterator training reads `dist` (from `distribute`) with.

    Several CPU replicas of a MirroredStrategy get a `HostFeed` over the dataset that
    `tf.distribute` made for this worker, which yields each global batch as
    `num_replicas_in_sync` pieces, replica by replica: TensorFlow's `MultiDeviceIterator`
    hands the same pieces round-robin to the devices, but through a pipeline and a
    prefetch thread per device that preempt the step's threads on the same cores
    (docs/performance.md). Logical CPU devices share the host's memory, so the pieces need
    no copying. Anything else (one replica, GPUs, several workers) gets `iter(dist)`.
    """
    if not several_cpu_replicas(strategy):
        return iter(dist)
    # The worker's dataset is what the distributed dataset iterates: its type spec's components.
    (dataset,) = dist._type_spec._to_components(dist)
    options = tf.data.Options()
    options.experimental_optimization.inject_prefetch = False  # no thread after the rebatch: prefetch comes before it
    return HostFeed(iter(dataset.with_options(options)), strategy.num_replicas_in_sync)


class _Pieces:
    """The next step's pieces from a `HostFeed`, with `get_next_as_optional`'s two methods."""

    def __init__(self, strategy, optionals):
        self.strategy, self.optionals = strategy, optionals

    def has_value(self):
        return tf.reduce_any(tf.stack([optional.has_value() for optional in self.optionals]))

    def get_value(self):
        # A replica whose piece is missing at the end of the data gets an empty batch, as
        # tf.distribute gives it, so every replica takes part in the step's all-reduces.
        pieces = [tf.cond(o.has_value(), o.get_value, lambda o=o: empty_like(o.element_spec)) for o in self.optionals]
        return self.strategy.experimental_distribute_values_from_function(
            lambda context: pieces[context.replica_id_in_sync_group]
        )


def empty_like(spec):
    """A batch of no examples with the shape and dtype of `spec`'s elements."""
    return tf.nest.map_structure(lambda s: tf.zeros([0, *[d or 0 for d in s.shape.as_list()[1:]]], s.dtype), spec)


def get_next_as_optional(strategy, iterator):
    """The next global batch from `iterator` (a `HostFeed` or a distributed iterator): an
    object whose `has_value()` says whether the data went on and `get_value()` gives the
    per-replica batch, as `tf.distribute`'s `get_next_as_optional` does. Call inside a tf.function."""
    if isinstance(iterator, HostFeed):
        return _Pieces(strategy, [iterator.iterator.get_next_as_optional() for _ in range(iterator.replicas)])
    return iterator.get_next_as_optional()


def drop_later(pipeline: list) -> threading.Thread:
    """Empty `pipeline`, a list holding the last references to a used dataset and its
    iterator, on a thread of its own; return that thread.

    Deleting a used iterator waits for the tf.data autotuning thread of each pipeline it
    holds (the host's, and one per device), and in TensorFlow 2.21 that thread can sleep
    on for seconds after the iterator is cancelled: 0-25 s for a 2-replica epoch
    (docs/performance.md). The deletion does not hold the GIL, so the next epoch trains meanwhile.
    The thread is not a daemon: a process that exits normally waits for it, as it would
    have waited for the deletion itself.
    """
    thread = threading.Thread(target=pipeline.clear, name="distcore-drop-iterator")
    thread.start()
    return thread


def one_cpu_replica(strategy) -> bool:
    """A MirroredStrategy of a single CPU device (GPUs keep prefetching to the device;
    only MirroredStrategy takes PER_REPLICA input)."""
    return _cpu_mirrored(strategy) and strategy.num_replicas_in_sync == 1


def several_cpu_replicas(strategy) -> bool:
    """A MirroredStrategy (one worker) of two or more CPU devices."""
    return _cpu_mirrored(strategy) and strategy.num_replicas_in_sync > 1


def _cpu_mirrored(strategy) -> bool:
    if not isinstance(strategy, tf.distribute.MirroredStrategy):
        return False
    return all(tf.DeviceSpec.from_string(d).device_type == "CPU" for d in strategy.extended.worker_devices)


def in_memory(images: np.ndarray, labels: np.ndarray, *, seed: int | None = None, epoch: int = 0):
    """Examples from arrays; shuffled by a seed that depends on the epoch, so epoch k's
    order is the same whether or not the run was stopped and resumed in between."""
    ds = tf.data.Dataset.from_tensor_slices((images, labels))
    return shuffled(ds, len(labels), seed, epoch) if seed is not None else ds


def shuffled(ds: tf.data.Dataset, size: int, seed: int, epoch: int) -> tf.data.Dataset:
    """Epoch `epoch`'s order under `seed`: one rule for arrays, TFRecords and the split
    planner's row numbers, so the planner shows the rows training really reads. The order
    also depends on TensorFlow's global seed, which training holds at its seed meanwhile (seeded)."""
    return ds.shuffle(size, seed=seed * 1009 + epoch, reshuffle_each_iteration=False)


def whole_global_batches(
    ds: tf.data.Dataset, examples: int, global_batch: int, api: str, drop_remainder: bool
) -> tf.data.Dataset:
    """drop_remainder drops the partial *global* batch. The function API shards the examples
    between workers before it batches, so a worker whose shard is one example longer would keep
    a batch more than the others: 1983 examples in batches of 64 on 2 workers would train 31
    steps, the last one half full, not 30. Leaving those examples out first makes every shard whole."""
    if drop_remainder and api == "function":
        return ds.take(examples // global_batch * global_batch)
    return ds


# The global seeds belong to the process, not to a run: builds that read them take turns.
SEEDING = threading.Lock()


@contextlib.contextmanager
def seeded(seed: int):
    """The global seeds at `seed` while the caller builds what they seed (initial weights, a
    shuffle's order), one caller at a time. Otherwise two trainings in two threads of one process
    each follow the other's seed (losses 0.45 apart from the same run alone), and a Controller
    made after another shuffles that one's later epochs by its own seed."""
    with SEEDING:
        seed_everything(seed)
        yield


def seed_everything(seed: int) -> None:
    """Python's, NumPy's and TensorFlow's global seeds: the same initial weights on any device
    set, and (with shuffled) the same order of examples."""
    import keras

    keras.utils.set_random_seed(seed)


# --- The file-backed form: TFRecord shards, so FILE/AUTO sharding has files to split. ---


def cache_root() -> Path:
    """$DISTCORE_CACHE_DIR, else ~/.cache/distcore, else (a user with no home) a folder of the
    user's own in the temporary folder."""
    home = home_folder()
    default = home / ".cache" / "distcore" if home else Path(tempfile.gettempdir()) / f"distcore-cache-{os.getuid()}"
    return Path(settings.get("DISTCORE_CACHE_DIR") or default)


def make_shared_cache_root() -> None:
    """Make $DISTCORE_CACHE_DIR, when distcore is first to use it, writable by every user and
    sticky, as /tmp is: an image names one folder for all its users (`docker run --user`), and
    a first user's 0755 folder would refuse the others any training-set size not cached yet.
    Sticky: none can remove another's cache."""
    chosen = settings.get("DISTCORE_CACHE_DIR")
    if chosen and not Path(chosen).exists():
        Path(chosen).mkdir(parents=True, exist_ok=True)
        os.chmod(chosen, 0o1777)


def write_records(folder: Path, images: np.ndarray, labels: np.ndarray, shards: int = RECORD_SHARDS) -> list[str]:
    """Write (index, label, image) records into `shards` contiguous files, once.

    Written into a temporary folder and renamed, so a crash never leaves a
    half-written cache that looks complete.
    """
    marker = folder / "complete.json"
    if marker.is_file():
        meta = json.loads(marker.read_text())
        if meta.get("examples") == len(labels) and meta.get("shards") == shards:
            return [str(folder / name) for name in meta["files"]]
    tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    bounds = np.linspace(0, len(labels), shards + 1).astype(int)
    names = []
    for shard in range(shards):
        name = f"part-{shard:05d}-of-{shards:05d}.tfrecord"
        with tf.io.TFRecordWriter(str(tmp / name)) as writer:
            for i in range(bounds[shard], bounds[shard + 1]):
                writer.write(_example(i, int(labels[i]), images[i]))
        names.append(name)
    (tmp / "complete.json").write_text(json.dumps({"examples": len(labels), "shards": shards, "files": names}))
    if folder.exists() and not marker.is_file():
        shutil.rmtree(folder, ignore_errors=True)  # an older, incomplete cache
    try:
        tmp.rename(folder)
    except OSError:  # another process (a cluster's other worker) finished first
        shutil.rmtree(tmp, ignore_errors=True)
        if not marker.is_file():
            raise
    return [str(folder / name) for name in names]


def _example(index: int, label: int, image: np.ndarray) -> bytes:
    feature = {
        "index": tf.train.Feature(int64_list=tf.train.Int64List(value=[index])),
        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
        "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[image.tobytes()])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


_SPEC = {
    "index": tf.io.FixedLenFeature([], tf.int64),
    "label": tf.io.FixedLenFeature([], tf.int64),
    "image": tf.io.FixedLenFeature([], tf.string),
}


def from_records(files: list[str], *, seed: int | None = None, epoch: int = 0, limit: int | None = None):
    """Examples (uint8 image, label) read from TFRecord files in file order."""
    if not files:
        raise DistcoreError("no TFRecord files to read.")
    ds = tf.data.TFRecordDataset(files)

    def parse(record):
        parsed = tf.io.parse_single_example(record, _SPEC)
        image = tf.reshape(tf.io.decode_raw(parsed["image"], tf.uint8), (28, 28))
        return image, tf.cast(parsed["label"], tf.uint8)

    ds = ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    if limit is not None:
        ds = ds.take(limit)
    return shuffled(ds, limit or 60_000, seed, epoch) if seed is not None else ds


def train_records(data, train_examples: int) -> list[str]:
    # Named by the data's content, not only its size: another --data-dir of 60,000 images
    # (a modified copy, say) must not train on the first one's records. Hashing 47 MB takes ~0.1 s.
    digest = hashlib.blake2b(data.train_images.tobytes(), digest_size=8)
    digest.update(data.train_labels.tobytes())
    folder = cache_root() / f"fashion-mnist-train-{len(data.train_labels)}-{digest.hexdigest()}"
    check_utf8_path(folder, "the TFRecord cache")
    try:
        make_shared_cache_root()
        return write_records(folder, data.train_images, data.train_labels)
    except OSError as err:
        chosen = settings.get("DISTCORE_CACHE_DIR")  # when it is set, say what it is set to, not "set it"
        fix = (
            f"DISTCORE_CACHE_DIR is set to {chosen!r}: point it to a folder you can write"
            if chosen
            else "set DISTCORE_CACHE_DIR to a folder you can write"
        )
        raise DistcoreError(f"cannot write the TFRecord cache in {folder} ({err.strerror or err}); {fix}.") from None
