"""TensorBoard's event files in RUN/logs: the writer, and rolling them back on a resume.

A resume trains again from its checkpoint, so the steps a killed process logged after it are
logged twice. metrics.jsonl drops their first records (runs.truncate_metrics); the event files
must drop theirs too, or TensorBoard draws those steps twice and its curves run backwards at
the resume. (TensorBoard would purge them on a SessionLog START event, which TF2's summary
API has no way to write.)
"""

from __future__ import annotations

import contextlib
import os
import struct
from pathlib import Path

import tensorflow as tf
from tensorboard.plugins.scalar import metadata as scalar_metadata

from . import checkpoints, loop
from .config import DistcoreError


def writer(folder: Path):
    """TensorBoard's writer into `folder`. One it cannot create (a file named logs, a folder
    made read-only) is the user's to fix, as for checkpoints/: an error, not a traceback."""
    try:
        return tf.summary.create_file_writer(str(folder))
    except tf.errors.OpError as err:
        raise DistcoreError(f"cannot write TensorBoard logs in {folder}: {checkpoints.file_error(err)}.") from None


def series_writer(writer, tag: str):
    """A function that writes a chunk's scalars under `tag` in one call, `write(steps, values)`:
    one eager `tf.summary.scalar` per step takes 4 ms of every 20-step chunk, about 4% of a
    1-replica run's time, for what one traced call does in 0.5 ms. The events are the ones
    `tf.summary.scalar` writes: `tf.summary.write` with the scalar plugin's metadata, and the
    tag as given (`tf.summary.scalar` in the traced loop would prefix it with "while/")."""
    metadata = scalar_metadata.create_summary_metadata(display_name=None, description=None)
    loop.quiet_own_tracing("series_writer.<locals>.write")  # one per run: not a retrace

    @tf.function(input_signature=[tf.TensorSpec([None], tf.int64), tf.TensorSpec([None], tf.float32)])
    def write(steps, values):
        with writer.as_default():
            for i in tf.range(tf.size(values)):
                tf.summary.write(tag, values[i], step=steps[i], metadata=metadata)

    return write


@contextlib.contextmanager
def summaries(writer, folder: Path):
    """Write summaries with `writer`; one that cannot write its file (a full disk) fails the
    run with the folder named, as a checkpoint does, not with TensorFlow's traceback."""
    try:
        with writer.as_default():
            yield
    except tf.errors.OpError as err:
        raise DistcoreError(f"cannot write TensorBoard logs in {folder}: {checkpoints.file_error(err)}.") from None


def roll_back(folder: Path, step: int, reclosed_epochs=()) -> int:
    """Drop the summaries of steps after `step`, and the epoch summaries at the steps in
    `reclosed_epochs` (epochs the resume closes again), from each event file in `folder`.
    Each file is rewritten in place, atomically, keeping its name and so its order.
    Returns how many summaries were dropped."""
    dropped = 0
    for path in sorted(Path(folder).glob("events.out.tfevents.*")):
        events, torn = read_events(path)
        keep = [e for e in events if not rolled_back(e, step, reclosed_epochs)]
        if len(keep) == len(events) and not torn:
            continue
        rewrite(path, keep)
        dropped += len(events) - len(keep)
    return dropped


def rewrite(path: Path, events: list) -> None:
    tmp = path.with_name(f".rollback-{os.getpid()}")  # no "tfevents" in it: TensorBoard skips it
    try:
        with tf.io.TFRecordWriter(str(tmp)) as out:
            for event in events:
                out.write(event.SerializeToString())
        os.replace(tmp, path)
    except (OSError, tf.errors.OpError) as err:
        if tmp.is_file():
            tmp.unlink()
        reason = err.strerror if isinstance(err, OSError) else checkpoints.file_error(err)
        raise DistcoreError(f"cannot write TensorBoard logs in {path.parent}: {reason}.") from None


def rolled_back(event, step: int, reclosed_epochs) -> bool:
    if not event.summary.value:
        return False  # the file's version record, which TensorBoard needs
    is_epoch = event.summary.value[0].tag.startswith("epoch/")
    return event.step > step or (is_epoch and event.step in reclosed_epochs)


def read_events(path: Path) -> tuple[list, bool]:
    """One event file's events, and whether it ends in a torn record (a killed writer).

    Each TFRecord is its length (8 bytes), the length's CRC (4), the data and the data's CRC
    (4). Read here by length alone: tf.data's reader takes 0.34 s per 3000 records, and the
    other, tf_record_iterator, prints a deprecation warning."""
    data, at, events = path.read_bytes(), 0, []
    while at + 12 <= len(data):
        (length,) = struct.unpack_from("<Q", data, at)
        end = at + 12 + length + 4
        if end > len(data):
            break
        events.append(tf.compat.v1.Event.FromString(data[at + 12 : end - 4]))
        at = end
    return events, at != len(data)
