"""TensorBoard's event files: rolled back to a checkpoint on a resume, as TensorBoard reads them."""

import os

import pytest
import tensorflow as tf
from tensorboard.backend.event_processing import event_accumulator

from conftest import fill_disk, tf_warnings, tmpfs
from distcore import events
from distcore.config import DistcoreError


def read(folder):
    """TensorBoard's reader of `folder`, every event file read in its order."""
    reader = event_accumulator.EventAccumulator(str(folder), size_guidance={event_accumulator.TENSORS: 0})
    reader.Reload()
    return reader


def tensorboard_steps(folder, tag):
    """The steps TensorBoard shows for `tag`."""
    reader = read(folder)
    return [e.step for e in reader.Tensors(tag)] if tag in reader.Tags()["tensors"] else []


def log(folder, steps, epoch_steps=()):
    writer = events.writer(folder)
    with writer.as_default():
        for step in steps:
            tf.summary.scalar("train/loss", 1.0 / step, step=step)
            if step in epoch_steps:
                tf.summary.scalar("epoch/test_accuracy", 0.5, step=step)
    writer.close()


def test_a_resume_rolls_the_logs_back_to_its_checkpoint(tmp_path):
    log(tmp_path, range(1, 26), epoch_steps=(10, 20))  # killed at step 25, its checkpoint at 20
    path = next(tmp_path.glob("events.out.tfevents.*"))
    path.write_bytes(path.read_bytes()[:-7])  # killed mid-record
    assert events.roll_back(tmp_path, 20) == 4  # steps 21-24; step 25's was torn
    log(tmp_path, range(21, 31), epoch_steps=(30,))
    assert tensorboard_steps(tmp_path, "train/loss") == list(range(1, 31))
    assert tensorboard_steps(tmp_path, "epoch/test_accuracy") == [10, 20, 30]
    assert all(
        tf.data.TFRecordDataset(str(p)).reduce(0, lambda n, _: n + 1) > 0  # CRCs intact
        for p in tmp_path.glob("events.out.tfevents.*")
    )


def test_epochs_the_resume_closes_again_lose_their_summaries(tmp_path):
    log(tmp_path, range(1, 11), epoch_steps=(10,))
    assert events.roll_back(tmp_path, 10, reclosed_epochs={10}) == 1
    assert tensorboard_steps(tmp_path, "epoch/test_accuracy") == []
    assert tensorboard_steps(tmp_path, "train/loss") == list(range(1, 11))


def test_nothing_to_roll_back_leaves_the_files_alone(tmp_path):
    log(tmp_path, range(1, 6))
    path = next(tmp_path.glob("events.out.tfevents.*"))
    before = path.stat().st_mtime_ns
    assert events.roll_back(tmp_path, 5) == 0 and path.stat().st_mtime_ns == before


def test_logs_it_cannot_rewrite_are_a_clear_error(tmp_path):
    log(tmp_path, range(1, 6))
    (tmp_path / f".rollback-{os.getpid()}").mkdir()  # in the way of the new file (root ignores chmod)
    with pytest.raises(DistcoreError, match="cannot write TensorBoard logs in .*: "):
        events.roll_back(tmp_path, 3)
    assert tensorboard_steps(tmp_path, "train/loss") == [1, 2, 3, 4, 5]  # left as it was


def test_summaries_that_cannot_be_written_are_a_plain_error(tmp_path):
    # On a full disk the writer's flush fails the run with the folder named, not TensorFlow's
    # ResourceExhaustedError traceback (exit 1) and a run that reads "died".
    with tmpfs(tmp_path / "disk", "size=64k") as disk:
        writer = events.writer(disk / "logs")
        fill_disk(disk)
        with pytest.raises(
            DistcoreError,
            match=rf"^cannot write TensorBoard logs in {disk / 'logs'}: "
            "No space left on device\\.$",
        ):
            with events.summaries(writer, disk / "logs"):
                for step in range(100):
                    tf.summary.scalar("train/loss", 1.0, step=step)
                writer.flush()


def summaries(folder):
    """(tag, step, value, plugin name) of every summary TensorBoard reads in `folder`."""
    reader = read(folder)
    return [
        (tag, e.step, float(tf.make_ndarray(e.tensor_proto)), reader.SummaryMetadata(tag).plugin_data.plugin_name)
        for tag in reader.Tags()["tensors"]
        for e in reader.Tensors(tag)
    ]


def test_a_chunks_series_is_written_as_tf_summary_scalar_writes_it(tmp_path):
    # One traced call per chunk instead of one eager tf.summary.scalar per step (4 ms of every
    # 20 steps); its first form tagged them "while/train/loss", and each run's new function
    # drew TensorFlow's retracing warning from the fifth in one process.
    log(tmp_path / "eager", range(11, 15))
    expected = summaries(tmp_path / "eager")
    assert [(tag, step, plugin) for tag, step, _, plugin in expected] == [
        ("train/loss", s, "scalars") for s in range(11, 15)
    ]
    with tf_warnings() as seen:
        for run in range(6):  # a notebook's sixth run
            writer = events.writer(tmp_path / f"series{run}")
            write = events.series_writer(writer, "train/loss")
            with events.summaries(writer, tmp_path / f"series{run}"):
                write(tf.range(11, 14, dtype=tf.int64), tf.constant([1 / 11, 1 / 12, 1 / 13], tf.float32))
                write(tf.constant([14], tf.int64), tf.constant([1 / 14], tf.float32))  # a shorter chunk
            writer.close()
    assert summaries(tmp_path / "series0") == summaries(tmp_path / "series5") == expected
    assert not [m for m in seen if "retracing" in m]
