"""Faults, injected: kills mid-step and mid-save, damaged checkpoints, unwritable disks."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from test_events import tensorboard_steps

from conftest import ROOT, cpus, fill_disk, tmpfs
from distcore import checkpoints, runs
from distcore.cluster import Task
from distcore.config import DistcoreError, TrainConfig
from distcore.controller import Controller, resume_config
from distcore.loop import StepRunner

ARGS = [
    "--replicas",
    "2",
    "--train-examples",
    "2048",
    "--test-examples",
    "500",
    "--checkpoint-every",
    "10",
    "--steps-per-loop",
    "5",
    "--seed",
    "6",
    "--json",
]  # 32 steps


def config():
    return TrainConfig(
        devices=cpus(2), train_examples=2048, test_examples=500, checkpoint_every=10, steps_per_loop=5, seed=6
    )


def weights(run_dir):
    runner = StepRunner(tf.distribute.get_strategy(), config())
    name = runs.list_checkpoints(run_dir)[-1]
    checkpoints.restore(runner.checkpoint(), Path(run_dir) / "checkpoints" / name)
    return [v.numpy() for v in runner.model.trainable_variables]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The same run, never interrupted: a `train` process like the killed and resumed ones.
    (Run inside this test process instead, after the rest of the suite, its weights drifted
    from a process's by float rounding, up to 4e-4, enough to fail the 1e-5 comparison.)"""
    run_dir = tmp_path_factory.mktemp("faults") / "reference"
    proc = train(run_dir)
    proc.stdout.read()
    assert proc.wait(timeout=300) == 0 and runs.read_status(run_dir)["step"] == 32
    return run_dir


def train(run_dir, *extra, script=None, env=None):
    command = [sys.executable, script, "train"] if script else [sys.executable, "-m", "distcore", "train"]
    return subprocess.Popen(
        command + ["--run-dir", str(run_dir), *ARGS, *extra],
        cwd=ROOT,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )


def resume_and_check(run_dir, reference, expected_from):
    proc = train(run_dir, "--resume")
    records = [json.loads(line) for line in proc.stdout]
    assert proc.wait(timeout=300) == 0
    assert records[0]["event"] == "resume" and records[0]["step"] == expected_from
    lines = (Path(run_dir) / "metrics.jsonl").read_text().splitlines()
    parsed = [json.loads(line) for line in lines]  # every line parses
    assert [r["step"] for r in parsed if "loss" in r] == list(range(1, 33))  # each step once
    assert runs.read_status(run_dir)["step"] == 32
    # TensorBoard too: the killed process logged steps up to its last checkpoint, the resume the rest.
    assert tensorboard_steps(Path(run_dir) / "logs", "train/loss") == list(range(1, 33))
    for a, b in zip(weights(run_dir), weights(reference)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_sigkill_in_the_middle_of_training(tmp_path, reference):
    proc = train(tmp_path / "r")
    for line in proc.stdout:
        if json.loads(line).get("step") == 25:
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait()
    assert runs.read_status(tmp_path / "r")["state"] == "running"  # it never got to say otherwise
    assert runs.list_checkpoints(tmp_path / "r") == ["ckpt-10", "ckpt-20"]
    resume_and_check(tmp_path / "r", reference, expected_from=20)


def newest_complete(run_dir):
    for name in reversed(runs.list_checkpoints(run_dir)):
        try:
            checkpoints.verify(Path(run_dir) / "checkpoints" / name)
            return int(name.split("-")[1])
        except Exception:
            continue


def test_sigkill_in_the_middle_of_a_checkpoint_save(tmp_path, reference):
    proc = train(tmp_path / "r", script=str(ROOT / "tests/helpers/kill_during_save.py"), env={"KILL_AT_STEP": "20"})
    proc.stdout.read()
    assert proc.wait() == -signal.SIGKILL
    folder = tmp_path / "r" / "checkpoints"
    assert list(folder.glob("ckpt-20_temp*"))  # it died while TensorFlow was writing ckpt-20
    assert "ckpt-20" not in (folder / "checkpoint").read_text()  # the save never completed
    # ckpt-20's files may or may not have been merged when it died; resume takes the
    # newest checkpoint that reads back whole.
    resume_and_check(tmp_path / "r", reference, expected_from=newest_complete(tmp_path / "r"))
    assert not list(folder.glob("*_temp*"))  # leftovers cleaned up


def damage(run_dir, how):
    folder = run_dir / "checkpoints"
    data, index = next(folder.glob("ckpt-20.data-*")), folder / "ckpt-20.index"
    if how == "truncate data":
        data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    elif how == "flip a byte":
        raw = bytearray(data.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        data.write_bytes(bytes(raw))
    elif how == "empty index":
        index.write_bytes(b"")
    elif how == "delete data":
        data.unlink()
    elif how == "delete checkpoint":
        data.unlink()
        index.unlink()
    elif how == "corrupt state file":
        (folder / "checkpoint").write_text("model_checkpoint_path: {{{ not a proto")
    elif how == "delete state file":
        (folder / "checkpoint").unlink()


@pytest.mark.parametrize(
    "how,expected",
    [
        ("truncate data", "ckpt-10"),
        ("flip a byte", "ckpt-10"),
        ("empty index", "ckpt-10"),
        ("delete data", "ckpt-10"),
        ("delete checkpoint", "ckpt-10"),
        ("corrupt state file", "ckpt-20"),
        ("delete state file", "ckpt-20"),
    ],
)
def test_damaged_newest_checkpoint_falls_back_and_says_so(tmp_path, how, expected):
    run_dir = tmp_path / "r"
    Controller(config().replace(max_steps=20), run_dir).run()
    damage(run_dir, how)
    controller = Controller(resume_config(run_dir, {"max_steps": 22}), run_dir, resume=True)
    assert controller.resumed_from == expected
    assert int(controller.runner.step.numpy()) == int(expected.split("-")[1])  # never a restart from 0
    fallbacks = [r["message"] for r in runs.read_metrics(run_dir) if r.get("event") == "fallback"]
    assert bool(fallbacks) == (expected == "ckpt-10")
    steps = int(expected.split("-")[1])  # what TensorBoard shows is rolled back with metrics.jsonl
    assert tensorboard_steps(run_dir / "logs", "train/loss") == list(range(1, steps + 1))
    controller.metrics.close()
    evaluated = checkpoints.evaluate(run_dir, None)
    assert evaluated["checkpoint"] == expected
    assert ("note" in evaluated) == (expected == "ckpt-10")
    if expected == "ckpt-10" and how != "delete checkpoint":
        with pytest.raises(DistcoreError, match="checkpoint ckpt-20.s files are damaged or incomplete"):
            checkpoints.evaluate(run_dir, "ckpt-20")


# What a restore under MultiWorkerMirroredStrategy raises when a peer dies in it (from a real run).
LOST_PEER = (
    "{{function_node __wrapped__CollectiveReduceV2_device_/job:worker/replica:0/task:0/device:CPU:0}} "
    "Collective ops is aborted by: The following tasks are unhealthy (stopped sending heartbeats): "
    "/job:worker/replica:0/task:1"
)


@pytest.mark.parametrize("error", [tf.errors.UnavailableError, tf.errors.InternalError, tf.errors.CancelledError])
def test_a_peer_failing_during_a_restore_is_not_taken_for_a_damaged_checkpoint(tmp_path, monkeypatch, error):
    # It was: "no checkpoint could be restored: ckpt-2: checkpoint ckpt-2 cannot be restored into
    # this model (... Collective ops is aborted ...); ckpt-1: ...", each older one blamed in turn.
    saver = checkpoints.Saver(tf.train.Checkpoint(v=tf.Variable(1.0)), tmp_path / "checkpoints")
    saver.save(1), saver.save(2)
    tried = []

    def lose_a_peer(self, path, *args, **kwargs):
        tried.append(Path(path).name)
        raise error(None, None, LOST_PEER)

    monkeypatch.setattr(tf.train.Checkpoint, "restore", lose_a_peer)
    with pytest.raises(error, match="Collective ops is aborted"):
        saver.restore_latest()
    assert tried == ["ckpt-2"]  # no fallback to older checkpoints


def test_a_cluster_worker_that_loses_a_peer_while_restoring_says_the_cluster_failed(tmp_path):
    class LostPeer:
        def restore_latest(self, on_fallback):
            raise tf.errors.UnavailableError(None, None, LOST_PEER)

    worker = Controller.__new__(Controller)  # only what Controller.restore uses: no cluster to start
    worker.config, worker.run_dir, worker.saver = config().replace(devices=("cpu:0",), workers=2), tmp_path, LostPeer()
    worker.task = Task(workers=2, index=1)
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"event": "checkpoint", "step": 10}) + "\n")
    with pytest.raises(DistcoreError) as caught:
        worker.restore(lambda message: None)
    assert str(caught.value) == (
        "worker 1: the cluster lost a peer or a collective failed "  # (not TF's node name)
        f"(UnavailableError: {LOST_PEER.split('}} ')[1]})."
    )


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MiB filesystem: room for the run's files and one checkpoint (1.4 MiB), not two."""
    with tmpfs(tmp_path / "disk", "size=2m") as mount:
        yield mount


def test_a_full_disk_is_a_clear_error_and_the_last_good_checkpoint_stays_latest(small_disk, tmp_path):
    run_dir = small_disk / "r"
    with pytest.raises(DistcoreError, match="No space left on device"):
        Controller(config(), run_dir).run()
    listed = runs.list_checkpoints(run_dir)
    assert listed == ["ckpt-10"]  # the save that ran out of room left no checkpoint behind
    checkpoints.verify(run_dir / "checkpoints" / listed[-1])
    assert checkpoints.state_file_latest(run_dir / "checkpoints") == "ckpt-10"
    import shutil

    moved = tmp_path / "moved"
    shutil.copytree(run_dir, moved)  # room again: the run resumes from its intact checkpoint
    assert Controller(resume_config(moved), moved, resume=True).run()["step"] == 32


def test_a_disk_full_before_set_up_is_a_clear_error_and_a_failure_is_still_recorded(tmp_path):
    # A disk already full when a run starts is a DistcoreError, not a traceback from the run's
    # lock (and a run reading "unknown"); with a little room, a run that then fails is marked
    # "failed" in place, not left "starting" (read as "died") for want of room to replace it.
    with tmpfs(tmp_path / "disk", "size=1m") as mount:
        (mount / "old").mkdir()
        runs.write_status(mount / "old", {"state": "starting", "pid": 1, "step": 0})
        fill_disk(mount)
        with pytest.raises(
            DistcoreError, match=r"^cannot write to the run directory .*new: No space left on device\.$"
        ):
            Controller(config(), mount / "new")
        runs.write_status(mount / "old", {"state": "failed", "message": "No space left on device.", "step": 0})
        assert runs.read_status(mount / "old")["state"] == "failed"
        assert sorted(p.name for p in (mount / "old").iterdir()) == ["status.json"]  # no temporary file left


def test_a_disk_full_when_training_begins_leaves_the_run_failed(tmp_path):
    # With 16 KiB free, config.json and status.json fit and the start event does not: the start
    # event is inside the failure path, so the run is "failed", not left "starting" (read as died).
    with tmpfs(tmp_path / "disk", "size=2m") as mount:
        controller = Controller(config(), mount / "r")
        fill_disk(mount)
        with pytest.raises(DistcoreError, match=r"metrics\.jsonl: No space left on device"):
            controller.run()
        status = runs.read_status(mount / "r")
        assert status["state"] == "failed" and "No space left on device" in status["message"]


def test_a_read_only_run_directory_is_a_clear_error(tmp_path):
    with tmpfs(tmp_path / "ro", "size=1m,ro") as mount:
        with pytest.raises(DistcoreError, match="cannot write to the run directory .*Read-only file system"):
            Controller(config(), mount / "r")


def test_a_metrics_log_that_cannot_grow_fails_the_run_plainly(tmp_path):
    # A full metrics.jsonl fails the run with a message, not a traceback from MetricsLog.close,
    # and status.json says "failed", not "running" (which the app calls "died ... (killed, or a crash)").
    import resource

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (8000, 8000))  # Python ignores SIGXFSZ: EFBIG

    run_dir = tmp_path / "r"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "distcore",
            "train",
            "--run-dir",
            str(run_dir),
            "--train-examples",
            "6000",
            "--test-examples",
            "200",
            "--steps-per-loop",
            "5",
        ],
        cwd=ROOT,
        preexec_fn=small_files,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "TMPDIR": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1"},
    )  # (a .pyc cut at 8000 bytes is kept)
    message = f"cannot write {run_dir / 'metrics.jsonl'}: File too large."
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip().splitlines()[-1] == f"error: {message}"
    status = runs.read_status(run_dir)
    assert status["state"] == "failed" and status["message"] == message and 0 < status["step"] < 94
