"""`python -m distcore` as a user runs it: help, JSON output, errors, stop and resume."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT, cpus
from distcore import devices, runs

SUBCOMMANDS = ["devices", "split", "planner", "train", "evaluate", "loss-check"]


def cli(*args, check=False, timeout=300, tmpdir=None):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **({"TMPDIR": str(tmpdir)} if tmpdir else {})}
    return subprocess.run([sys.executable, "-m", "distcore", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, check=check, env=env)


def test_help_for_every_subcommand():
    out = cli("--help", check=True).stdout
    for command in SUBCOMMANDS:
        assert command in out
    for command in SUBCOMMANDS:
        assert "usage: python -m distcore " + command in cli(command, "--help", check=True).stdout


def test_user_errors_exit_2_with_a_message_and_json():
    result = cli("split", "--examples", "4", "--global-batch", "8", "--replicas", "2", "--json")
    assert result.returncode == 2
    assert "larger than the dataset" in json.loads(result.stdout)["error"]
    assert result.stderr.strip().splitlines()[-1].startswith("error: global batch size (8)")
    result = cli("train", "--run-dir", "/tmp/x", "--devices", "cpu:0,cpu:0")
    assert result.returncode == 2 and "listed twice" in result.stderr
    assert "Traceback" not in result.stderr


def test_replicas_are_refused_with_workers_and_the_message_says_what_to_use():
    result = cli("split", "--workers", "2", "--replicas", "4", "--examples", "8", "--global-batch", "4")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "error: --replicas 4 does not apply with --workers 2: each worker process has its own devices "
        "(MultiWorkerMirroredStrategy gives a CPU-only worker exactly one replica). Drop --replicas; "
        "for 4 replicas on CPU use --workers 4.")
    result = cli("train", "--multi-worker", "--run-dir", "/tmp/x", "--devices", "cpu:0,cpu:1")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "error: --devices cpu:0,cpu:1 does not apply with --multi-worker: each worker process has its own "
        "devices (MultiWorkerMirroredStrategy gives a CPU-only worker exactly one replica). Drop --devices; "
        "on GPUs, `cluster --replicas-per-worker R` gives each local worker R GPUs.")


def test_devices_json():
    info = json.loads(cli("devices", "--json", check=True).stdout)
    assert info["tensorflow"].startswith("2.") and info["default"]


def test_sigterm_stops_at_a_step_boundary_with_a_checkpoint_then_resume_finishes(tmp_path):
    run_dir, scratch = tmp_path / "run", tmp_path / "tmp"
    scratch.mkdir()
    args = ["train", "--run-dir", str(run_dir), "--replicas", "2", "--train-examples", "6400",
            "--test-examples", "500", "--epochs", "3", "--steps-per-loop", "5", "--seed", "2", "--json"]
    proc = subprocess.Popen([sys.executable, "-m", "distcore", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env={**os.environ, "TMPDIR": str(scratch)})
    records = []
    for line in proc.stdout:  # wait for real progress, then ask it to stop
        records.append(json.loads(line))
        if records[-1].get("step", 0) >= 20 and "loss" in records[-1]:
            proc.send_signal(signal.SIGTERM)
            break
    records += [json.loads(line) for line in proc.stdout]
    assert proc.wait(timeout=120) == 0
    stopped = runs.read_status(run_dir)
    assert stopped["state"] == "stopped" and stopped["step"] % 5 == 0 and stopped["step"] < 300
    assert runs.list_checkpoints(run_dir)[-1] == f"ckpt-{stopped['step']}"
    assert records[-1]["event"] == "stopped"
    assert runs.read_config(run_dir)["intra_op_threads"] == devices.intra_op_threads(2)  # a core share per replica

    result = cli("train", "--run-dir", str(run_dir), "--resume", "--json", check=True, tmpdir=scratch)
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert lines[0]["event"] == "resume" and lines[0]["step"] == stopped["step"]
    assert [r["step"] for r in lines if "loss" in r][0] == stopped["step"] + 1
    assert runs.read_status(run_dir)["state"] == "finished" and runs.read_status(run_dir)["step"] == 300

    evaluated = json.loads(cli("evaluate", "--run-dir", str(run_dir), "--no-strategy", "--json", check=True,
                               tmpdir=scratch).stdout)
    final = [r for r in runs.read_metrics(run_dir) if r.get("checkpoint") == "ckpt-300"][0]
    assert evaluated["checkpoint"] == "ckpt-300" and evaluated["accuracy"] == final["test_accuracy"]
    # Autograph's files for the converted functions are gone, although the processes skip
    # Python's exit (os._exit) and with it autograph's own clean-up.
    assert sorted(p.name for p in scratch.iterdir()) == []


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    from distcore.config import TrainConfig
    from distcore.controller import Controller

    run_dir = tmp_path_factory.mktemp("cli") / "done"
    config = TrainConfig(devices=cpus(2), epochs=1, train_examples=640, test_examples=200, steps_per_loop=5)
    assert Controller(config, run_dir).run() == {"state": "finished", "step": 10, "total_steps": 10}
    return run_dir


def run_files(run_dir):
    return {name: (run_dir / name).read_text() for name in ("config.json", "status.json", "metrics.jsonl")}


def test_a_resume_with_nothing_left_to_train_is_refused_before_any_process_starts(finished_run):
    before = run_files(finished_run)
    for command in (["train"], ["cluster", "--workers", "2"]):  # the cluster: no worker is started
        result = cli(*command, "--run-dir", str(finished_run), "--resume", "--json", timeout=60)
        message = "run done already finished at step 10 of 10; raise epochs (or max steps) to train more."
        assert result.returncode == 2 and json.loads(result.stdout) == {"error": message}
        assert result.stderr.strip().splitlines()[-1] == "error: " + message
    result = cli("train", "--run-dir", str(finished_run), "--resume", "--epochs", "1", "--max-steps", "5")
    assert result.returncode == 2
    assert ("error: cannot resume done with epochs 1 and max steps 5: that makes 5 steps, and the run has "
            "already trained 10 (ckpt-10).") in result.stderr
    assert run_files(finished_run) == before  # still finished, config.json untouched


def test_loss_check_shows_the_two_mistakes():
    result = json.loads(cli("loss-check", "--replicas", "4", "--global-batch", "64", "--json", check=True).stdout)
    assert result["per_replica_examples"] == [16, 16, 16, 16]
    assert result["distributed"] == pytest.approx(result["single_device"], rel=1e-5)
    assert result["mistake_reduce_mean"] == pytest.approx(4 * result["single_device"], rel=1e-4)
    assert result["mistake_keras_mean"] == pytest.approx(result["single_device"] / 4, rel=1e-4)
