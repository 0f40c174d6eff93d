"""`train --engine ray`: Ray Train workers on a local Ray instance bound to 127.0.0.1."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import ROOT, wait_for
from distcore import cli, rayengine, runs
from distcore.config import DistcoreError

SMALL = ["--global-batch", "32", "--train-examples", "320", "--test-examples", "200", "--steps-per-loop", "3"]
# 60 steps of 256 examples (6 epochs of 10), about 10 steps a second on 2 cores: a run still training
# seconds after its first record, so a stop or a kill lands in the middle of it.
STEADY = ["--global-batch", "256", "--train-examples", "2560", "--test-examples", "200", "--steps-per-loop", "2"]
STEADY += ["--epochs", "6", "--checkpoint-every", "10"]
STEADY_STEPS = 60


def distcore(*args, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "distcore", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def records(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def driver(*args):
    """`distcore train --engine ray --workers 2 ...` in the background."""
    return subprocess.Popen(
        [sys.executable, "-m", "distcore", "train", "--engine", "ray", "--workers", "2", *args],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def ended(process, timeout=240) -> tuple[str, str]:
    """The driver's output once it has ended; killed if it has not within `timeout`."""
    try:
        return process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def reading(process) -> tuple[list[str], list[str]]:
    """The driver's stdout and stderr lines, read on threads as it writes them."""
    out: tuple[list[str], list[str]] = ([], [])
    for stream, lines in zip((process.stdout, process.stderr), out):
        threading.Thread(target=lambda s=stream, got=lines: [got.append(line) for line in s], daemon=True).start()
    return out


def logged_steps(run) -> list[int]:
    return [r["step"] for r in runs.read_metrics(run) if "loss" in r and "step" in r]


def trainers(run) -> list[str]:
    """This run's trainer processes still alive (`train --multi-worker --run-dir RUN`)."""
    return subprocess.run(["pgrep", "-f", f"run-dir {run}"], capture_output=True, text=True).stdout.split()


def test_missing_ray_says_how_to_install_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    code = cli.main(["train", "--engine", "ray", "--workers", "2", "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "pip install 'distcore[ray]'" in err and "requirements-ray.txt" in err
    assert not (tmp_path / "run").exists()


def test_ray_flags_need_the_ray_engine(tmp_path, capsys):
    code = cli.main(["train", "--workers", "2", "--run-dir", str(tmp_path / "run")])
    assert code == 2 and "--engine ray" in capsys.readouterr().err
    code = cli.main(["train", "--max-failures", "2", "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and "--max-failures applies only with --engine ray" in err and "--resume" in err
    assert not (tmp_path / "run").exists()


def test_max_failures_is_a_count_from_zero(tmp_path, capsys):
    code = cli.main(["train", "--engine", "ray", "--workers", "2", "--max-failures", "-1", "--run-dir", str(tmp_path)])
    assert code == 2 and "max failures (-1) must be a whole number from 0" in capsys.readouterr().err


def test_a_workers_own_error_is_not_restarted_but_a_lost_process_is(tmp_path):
    log = tmp_path / "stderr"
    log.write_text("W0000 noise\nerror: --data-dir (data_dir=) /x lacks train-images-idx3-ubyte.gz.\nI0000 exit\n")
    assert rayengine.own_error(2, log)  # a DistcoreError of the run's own: every new group meets it
    log.write_text(
        "error: worker 1: the cluster lost a peer or a collective failed (UnavailableError: Collective ops is "
        "aborted by: recvmsg:Connection reset by peer).\n"
    )
    assert not rayengine.own_error(2, log)  # a peer lost: the next group has it back
    log.write_text(
        "error: cannot start this worker's server on 127.0.0.1:4000 (UnknownError: ...: is the port in use?)."
    )
    assert not rayengine.own_error(2, log)  # a port taken meanwhile: the next group has new ones
    log.write_text("Traceback (most recent call last):\nValueError: x\n")
    assert not rayengine.own_error(1, log)  # a crash
    assert not rayengine.own_error(-signal.SIGKILL, tmp_path / "gone")  # killed: no log needed
    for sign, module in zip(rayengine.TRANSIENT_ERRORS, ("controller.py", "devices.py")):
        assert sign in (ROOT / "distcore" / module).read_text()  # the words of those errors, where they are made


def test_the_outcome_names_the_runs_own_error_first_then_the_spent_restarts(tmp_path):
    killed = "distcore worker 0 was killed by SIGKILL; its log ends: epoch 1"
    lost_peer = "distcore worker 1 exited with status 2; its log ends: error: worker 1: the cluster lost a peer"
    state = {"final": None, "groups": 3, "failures": [(1, killed), (1, lost_peer), (2, killed), (3, killed)]}
    error = RuntimeError(f"Training failed.\n{killed}\nmore")
    message = rayengine.outcome_message(error, state, 2, [], tmp_path)
    assert message == f"the Ray run failed after 2 restart(s) of the workers (--max-failures 2): {killed}"
    assert rayengine.outcome_message(None, state, 2, [], tmp_path) is None  # Ray recovered: no failure
    own = "distcore worker 0 exited with status 2; its log ends: error: --data-dir lacks ..."
    assert rayengine.outcome_message(error, {**state, "final": own}, 2, [], tmp_path) == own
    assert rayengine.cause(state, 1) == killed  # the group's first failure, not the lost peer it caused
    assert rayengine.cause(state, 4).startswith("Ray lost a worker")  # a lost Ray worker reports nothing
    # A stop request after a failure: no restart, and the run, neither finished nor stopped, failed.
    stopped = rayengine.outcome_message(None, state, 2, [signal.SIGTERM], tmp_path)
    assert stopped.startswith(f"a worker failed ({killed}) and the stop request came before")
    runs.write_status(tmp_path, {"state": "stopped", "step": 20})  # the children stopped it themselves
    assert rayengine.outcome_message(None, state, 2, [signal.SIGTERM], tmp_path) is None


def test_a_local_run_folder_is_refused_on_a_cluster_of_several_nodes(tmp_path, monkeypatch):
    rayengine.check_storage(tmp_path, nodes=1)  # one node: any folder
    monkeypatch.setattr(rayengine, "filesystem_type", lambda path: "ext4")
    with pytest.raises(DistcoreError, match="3 nodes.*local filesystem \\(ext4\\).*every node mounts"):
        rayengine.check_storage(tmp_path, nodes=3)
    monkeypatch.setattr(rayengine, "filesystem_type", lambda path: "nfs4")
    rayengine.check_storage(tmp_path, nodes=3)


@pytest.mark.slow
def test_ray_workers_train_as_two_replicas_stop_with_a_checkpoint_and_resume(tmp_path):
    run = tmp_path / "run"
    process = driver("--run-dir", str(run), *STEADY, "--json")
    out, err_lines = reading(process)

    def printed_steps():
        return [r["step"] for r in records("".join(out)) if "loss" in r]

    try:
        assert wait_for(lambda: printed_steps() or process.poll() is not None, timeout=180)
        assert process.poll() is None and printed_steps()[0] == 1  # --json prints as the workers train
        process.send_signal(signal.SIGINT)  # Ctrl-C: Ray Train's own handler would abort with nothing saved
        process.wait(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    err = "".join(err_lines)
    assert process.returncode == 128 + signal.SIGINT, err[-2000:]
    status = runs.read_status(run)
    assert status["state"] == "stopped" and 0 < status["step"] < STEADY_STEPS
    assert runs.list_checkpoints(run)[-1] == f"ckpt-{status['step']}"
    assert "Ray restarted" not in err  # a stop is no failure: nothing restarts the workers
    assert trainers(run) == []
    assert json.loads((run / "config.json").read_text())["workers"] == 2

    # The two Ray workers' first step is the 2-replica single-process run's.
    local = distcore(
        "train", "--replicas", "2", "--run-dir", str(tmp_path / "local"), *STEADY, "--max-steps", "1", "--json"
    )
    assert local.returncode == 0, local.stderr[-2000:]
    local_loss = next(r["loss"] for r in records(local.stdout) if r.get("step") == 1 and "loss" in r)
    first = next(r["loss"] for r in runs.read_metrics(run) if r.get("step") == 1 and "loss" in r)
    assert first == pytest.approx(local_loss, abs=1e-5)

    resumed = distcore("train", "--engine", "ray", "--workers", "2", "--resume", "--run-dir", str(run), "--json")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert runs.read_status(run)["state"] == "finished"
    assert logged_steps(run) == list(range(1, STEADY_STEPS + 1))  # each step once, in order
    resume = [r for r in runs.read_metrics(run) if r.get("event") == "resume"]
    assert [r["message"].split(" on ")[0] for r in resume] == [
        f"resumed from ckpt-{status['step']} at step {status['step']}"
    ]
    assert trainers(run) == []
    logged = [r for r in runs.read_metrics(run) if "test_accuracy" in r][-1]
    evaluated = distcore("evaluate", "--run-dir", str(run), "--no-strategy", "--json")
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    assert json.loads(evaluated.stdout.splitlines()[-1])["accuracy"] == pytest.approx(logged["test_accuracy"], abs=1e-6)


@pytest.mark.slow
def test_a_killed_worker_is_restarted_by_ray_and_resumes_from_the_newest_checkpoint(tmp_path):
    run = tmp_path / "run"
    process = driver("--run-dir", str(run), *STEADY, "--max-failures", "2")

    def past_a_checkpoint():  # steps logged after a checkpoint: the kill loses them, and they are trained again
        names = runs.list_checkpoints(run)
        return names and max(logged_steps(run), default=0) >= runs.checkpoint_step(names[-1]) + 2

    try:
        assert wait_for(lambda: past_a_checkpoint() or process.poll() is not None, timeout=180, poll=0.05)
        assert process.poll() is None, process.communicate()[1][-2000:]
        saved, chief = runs.checkpoint_step(runs.list_checkpoints(run)[-1]), runs.read_status(run)["pid"]
        assert b"--multi-worker" in Path(f"/proc/{chief}/cmdline").read_bytes()  # the chief's trainer
        os.kill(chief, signal.SIGKILL)
        killed, lost = time.monotonic(), max(logged_steps(run))
        assert lost < STEADY_STEPS  # killed in the middle of the run
        wait_for(lambda: max(logged_steps(run), default=0) > lost or process.poll() is not None, timeout=180)
        recovered = time.monotonic() - killed
    finally:
        out, err = ended(process)
    assert process.returncode == 0, err[-3000:]
    assert "Ray restarted the workers (restart 1 of at most 2) after: distcore worker 0 was killed by SIGKILL" in err
    assert recovered < 120  # from the kill to the first step after it
    assert runs.read_status(run)["state"] == "finished"
    assert logged_steps(run) == list(range(1, STEADY_STEPS + 1))  # each step once: the lost ones rolled back
    resume = [r for r in runs.read_metrics(run) if r.get("event") == "resume"]
    assert len(resume) == 1 and resume[0]["step"] >= saved  # the newest checkpoint when the chief died
    assert resume[0]["message"].startswith(f"resumed from ckpt-{resume[0]['step']} at step {resume[0]['step']}")
    assert trainers(run) == []


@pytest.mark.slow
def test_a_workers_own_error_ends_the_ray_run_without_a_restart(tmp_path):
    run = tmp_path / "run"
    result = distcore(
        "train", "--engine", "ray", "--workers", "2", "--run-dir", str(run), "--data-dir", str(tmp_path / "none"),
        "--max-steps", "6", "--max-failures", "3", *SMALL,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-2000:]
    assert "exited with status 2; its log ends: error: --data-dir" in result.stderr and "lacks" in result.stderr
    assert "Ray restarted" not in result.stderr
    assert not (run / "config.json").exists() and trainers(run) == []
