"""A checkpoint trained on 2 replicas evaluates the same on none, 1, 2, 3 or 5."""

import re
import subprocess

import pytest
import tensorflow as tf

from conftest import cpus, tf_warnings
from distcore import checkpoints, runs
from distcore.config import DistcoreError


def logged(run_dir, name):
    return next(r for r in runs.read_metrics(run_dir) if r.get("checkpoint") == name)


# On 5 replicas the last test batch of 16 comes as 4+4+4+4+0: an empty replica.
@pytest.mark.parametrize(
    "device_names", [None, cpus(1), cpus(3), cpus(5)], ids=["no-strategy", "1-replica", "3-replicas", "5-replicas"]
)
def test_evaluation_matches_the_logged_test_accuracy(trained_run, device_names):
    run_dir, _ = trained_run
    result = checkpoints.evaluate(run_dir, "ckpt-800", device_names)
    assert result["checkpoint"] == "ckpt-800" and result["step"] == 800 and result["examples"] == 10000
    # Each device set runs the kernels on another per-replica batch than training's 32, so a prediction whose
    # top two logits tie to within float32 rounding may go either way: one of the 10,000 (+0.5 for the quotients).
    assert result["accuracy"] == pytest.approx(logged(run_dir, "ckpt-800")["test_accuracy"], abs=1.5 / 10000)
    assert result["loss"] == pytest.approx(logged(run_dir, "ckpt-800")["test_loss"], rel=1e-5)


def test_newest_checkpoint_with_details(trained_run):
    run_dir, _ = trained_run
    result = checkpoints.evaluate(run_dir, None, cpus(2), details=True)
    assert result["checkpoint"] == "ckpt-938"
    confusion = result["confusion"]
    assert sum(map(sum, confusion)) == 10000 and all(sum(row) == 1000 for row in confusion)
    assert sum(confusion[i][i] for i in range(10)) / 10000 == pytest.approx(result["accuracy"], abs=1e-6)
    # 16 test images, half of them mistakes from the whole test set (about 1,200 of the 10,000), first.
    samples = result["samples"]
    wrong = [s for s in samples if s["predicted"] != s["label"]]
    assert len(samples) == 16 and samples[:8] == wrong and len({s["index"] for s in samples}) == 16
    assert [s["index"] for s in samples[8:]] == sorted(s["index"] for s in samples[8:])


def test_sample_images_come_from_the_runs_own_test_set(trained_run, tmp_path):
    run_dir, _ = trained_run
    few = tmp_path / "few"  # the same checkpoint, as a run that tests on 7 examples
    (few / "checkpoints").mkdir(parents=True)
    for f in (run_dir / "checkpoints").glob("ckpt-400.*"):
        (few / "checkpoints" / f.name).write_bytes(f.read_bytes())
    runs.write_json_atomic(few / "config.json", {**runs.read_config(run_dir), "test_examples": 7})
    result = checkpoints.evaluate(few, "ckpt-400", details=True)
    assert result["examples"] == 7 and sum(map(sum, result["confusion"])) == 7
    assert sorted(s["index"] for s in result["samples"]) == list(range(7))  # of the test set only, not 16


def test_the_used_test_iterator_is_deleted_off_the_calling_thread(trained_run, dropped_iterators):
    run_dir, _ = trained_run
    assert checkpoints.evaluate(run_dir, "ckpt-400", cpus(2))["examples"] == 10000
    assert dropped_iterators() == ["distcore-drop-iterator"]  # see inputs.drop_later


def test_unknown_and_malformed_checkpoint_names(trained_run):
    run_dir, _ = trained_run
    with pytest.raises(DistcoreError, match="has no checkpoint ckpt-7; it has: ckpt-400"):
        checkpoints.evaluate(run_dir, "ckpt-7")
    with pytest.raises(DistcoreError, match="not allowed"):
        checkpoints.evaluate(run_dir, "../ckpt-400")


def test_a_checkpoint_of_another_model_is_refused(trained_run, tmp_path):
    run_dir, _ = trained_run
    other = tmp_path / "other"
    (other / "checkpoints").mkdir(parents=True)
    for f in (run_dir / "checkpoints").glob("ckpt-400.*"):
        (other / "checkpoints" / f.name).write_bytes(f.read_bytes())
    config = runs.read_config(run_dir)
    runs.write_json_atomic(other / "config.json", {**config, "model": "mlp"})
    with pytest.raises(DistcoreError, match="cannot be restored into this model"):
        checkpoints.evaluate(other, "ckpt-400")


def test_a_save_that_the_os_refuses_says_why_without_tensorflows_wrapping(tmp_path):
    # The OS's reason alone, not "could not save a checkpoint in ro4/checkpoints: {{function_node __wrapped__
    # SaveV2_dtypes_35_device_/job:localhost/...}} ro4/checkpoints/ckpt-10_temp; Operation not permitted [Op:SaveV2]".
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    saver = checkpoints.Saver(tf.train.Checkpoint(v=tf.Variable(1.0)), folder)
    if subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode:
        pytest.skip("needs root and a filesystem that has chattr +i")
    try:
        with pytest.raises(DistcoreError) as caught:
            saver.save(10)
    finally:
        subprocess.run(["chattr", "-i", str(folder)])
    assert str(caught.value) == f"could not save a checkpoint in {folder}: Operation not permitted."


def test_damaged_files_are_called_damaged_and_the_fallback_note_reads_as_one_sentence(tmp_path):
    # A truncated .data file is called damaged, not "cannot be restored into this model (Read less bytes
    # than requested)" as if the model differed, and the note has no "requested).; ckpt-30: …".
    saver = checkpoints.Saver(tf.train.Checkpoint(v=tf.Variable(tf.zeros(1000))), tmp_path / "checkpoints")
    for step in (1, 2, 3):
        saver.save(step)
    for step in (2, 3):
        data_file = next((tmp_path / "checkpoints").glob(f"ckpt-{step}.data-*"))
        data_file.write_bytes(data_file.read_bytes()[:100])
    notes = []
    assert saver.restore_latest(notes.append) == "ckpt-1"
    assert re.fullmatch(
        r"restored ckpt-1, the newest intact checkpoint; skipped ckpt-3: checkpoint ckpt-3's "
        r"files are damaged or incomplete \(.+\); ckpt-2: checkpoint ckpt-2's files are damaged "
        r"or incomplete \(.+\)\.",
        notes[0],
    )
    assert ".;" not in notes[0] and "into this model" not in notes[0]


def test_every_worker_knows_it_resumed_from_the_chiefs_checkpoint(tmp_path):
    # Saving a step runs a test pass (collectives), so every worker must skip the same saves.
    # A non-chief saves into a folder of its own and restores from the chief's: it looked in its
    # own, found no checkpoint of the step it had resumed from, and alone tested and saved it.
    chief = checkpoints.Saver(tf.train.Checkpoint(v=tf.Variable(1.0)), tmp_path / "run" / "checkpoints")
    chief.save(10)
    worker = checkpoints.Saver(
        tf.train.Checkpoint(v=tf.Variable(0.0)),
        tmp_path / "worker-1" / "checkpoints",
        read_folder=tmp_path / "run" / "checkpoints",
    )
    assert worker.restore_latest() == "ckpt-10"
    assert worker.has(10) and not worker.has(20)
    worker.save(20)
    assert worker.has(20)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    from distcore.config import TrainConfig
    from distcore.controller import Controller

    run_dir = tmp_path_factory.mktemp("tiny") / "r"
    Controller(TrainConfig(devices=cpus(2), train_examples=640, test_examples=200, max_steps=2), run_dir).run()
    return run_dir


def test_evaluate_reads_its_devices_as_a_device_set_and_reports_them_normalised(tiny_run):
    # "cpu:0,cpu:1" (as TrainConfig takes it) works, ("cpu:0", "cpu:0") is refused with distcore's
    # message, not TensorFlow's "No duplicates allowed", and ("CPU:0",) is reported back as "cpu:0".
    assert checkpoints.evaluate(tiny_run, None, "cpu:0,cpu:1")["devices"] == ["cpu:0", "cpu:1"]
    assert checkpoints.evaluate(tiny_run, None, ("CPU:0",))["devices"] == ["cpu:0"]
    for bad, message in [(("cpu:0", "cpu:0"), "device cpu:0 is listed twice"), ((), "the device set is empty")]:
        with pytest.raises(DistcoreError, match=message):
            checkpoints.evaluate(tiny_run, None, bad)


def test_a_checkpoint_pruned_while_it_is_read_is_said_so_and_the_newest_is_read_again(tiny_run, tmp_path, monkeypatch):
    # `evaluate` of a run that keeps 1 checkpoint, while it trains: the newest, listed once, can be
    # deleted between verify() and restore() as the run saves a newer one; the list is read again,
    # not "cannot be restored into this model" (8 times of 14).
    import shutil

    run_dir = tmp_path / "r"
    shutil.copytree(tiny_run, run_dir)
    folder = run_dir / "checkpoints"
    real = checkpoints.verify

    def pruned_as_read(prefix):  # the run saves ckpt-4 and deletes ckpt-2 once it is verified
        real(prefix)
        for f in folder.glob(f"{prefix.name}.*"):
            f.rename(folder / f.name.replace(prefix.name, "ckpt-4"))

    monkeypatch.setattr(checkpoints, "verify", pruned_as_read)
    with pytest.raises(checkpoints.Vanished, match="^checkpoint ckpt-2 was deleted while it was being read"):
        checkpoints.evaluate(run_dir, "ckpt-2")  # one asked for by name
    for f in folder.glob("ckpt-4.*"):
        f.rename(folder / f.name.replace("ckpt-4", "ckpt-2"))
    assert checkpoints.evaluate(run_dir)["checkpoint"] == "ckpt-4"  # the newest, read again


def test_the_warnings_of_a_restore_that_failed_half_way_are_dropped():
    # A read again after a checkpoint vanished prints none of TensorFlow's 26 or so "Value in
    # checkpoint could not be found in the restored object" before a right result.
    logger = tf.get_logger()
    with tf_warnings() as said:
        with checkpoints.quiet_unrestored_values():
            logger.warning("Value in checkpoint could not be found in the restored object: (root).step")
            logger.warning("Detecting that an object or model or tf.train.Checkpoint is being deleted with ...")
            logger.warning("another warning")
        logger.warning("Value in checkpoint could not be found in the restored object: (root).epoch")
    assert said == ["another warning", "Value in checkpoint could not be found in the restored object: (root).epoch"]


def test_samples_show_a_good_models_few_mistakes_and_a_poor_models_right_answers():
    labels = [i % 10 for i in range(100)]
    good = list(labels)
    for i in (50, 70, 90):  # three mistakes, none among the first 16 examples
        good[i] = (labels[i] + 1) % 10
    picked = checkpoints.sample_predictions(labels, good)
    assert [s["index"] for s in picked] == [50, 70, 90, *range(13)]
    assert [s["predicted"] for s in picked[:3]] == [1, 1, 1] and all(s["predicted"] == s["label"] for s in picked[3:])
    poor = [(y + 1) % 10 for y in labels]
    poor[40] = labels[40]  # one right answer among 100
    assert [s["index"] for s in checkpoints.sample_predictions(labels, poor)] == [*range(15), 40]
    half = [(y + 1) % 10 if i % 2 else y for i, y in enumerate(labels)]
    assert [s["index"] for s in checkpoints.sample_predictions(labels, half)] == [*range(1, 16, 2), *range(0, 16, 2)]
    assert checkpoints.sample_predictions(labels[:5], good[:5]) == [
        {"index": i, "label": i, "predicted": i} for i in range(5)
    ]
    assert checkpoints.confusion_matrix([0, 1, 1], [0, 0, 5], 2) == [[1, 0], [1, 0]]  # 5 is no class: left out
