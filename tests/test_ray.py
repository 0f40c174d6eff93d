"""`train --engine ray`: Ray Train workers on a local Ray instance bound to 127.0.0.1."""

import json
import signal
import subprocess
import sys

import pytest

from conftest import ROOT, wait_for
from distcore import cli, rayengine, runs
from distcore.config import DistcoreError

SMALL = ["--global-batch", "32", "--train-examples", "320", "--test-examples", "200", "--steps-per-loop", "3"]


def distcore(*args, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "distcore", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def records(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


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


def test_a_local_run_folder_is_refused_on_a_cluster_of_several_nodes(tmp_path, monkeypatch):
    rayengine.check_storage(tmp_path, nodes=1)  # one node: any folder
    monkeypatch.setattr(rayengine, "filesystem_type", lambda path: "ext4")
    with pytest.raises(DistcoreError, match="3 nodes.*local filesystem \\(ext4\\).*every node mounts"):
        rayengine.check_storage(tmp_path, nodes=3)
    monkeypatch.setattr(rayengine, "filesystem_type", lambda path: "nfs4")
    rayengine.check_storage(tmp_path, nodes=3)


@pytest.mark.slow
def test_two_ray_workers_train_as_two_replicas_do(tmp_path):
    ray_run, local_run = tmp_path / "ray", tmp_path / "local"
    result = distcore(
        "train", "--engine", "ray", "--workers", "2", "--run-dir", str(ray_run), "--max-steps", "6", *SMALL, "--json"
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert (runs.read_status(ray_run) or {}).get("state") == "finished"
    assert runs.list_checkpoints(ray_run) == ["ckpt-6"]
    assert json.loads((ray_run / "config.json").read_text())["workers"] == 2
    ray_losses = {r["step"]: r["loss"] for r in records(result.stdout) if "loss" in r}
    assert sorted(ray_losses) == list(range(1, 7))

    local = distcore("train", "--replicas", "2", "--run-dir", str(local_run), "--max-steps", "1", *SMALL, "--json")
    assert local.returncode == 0, local.stderr[-2000:]
    local_loss = next(r["loss"] for r in records(local.stdout) if r.get("step") == 1 and "loss" in r)
    assert ray_losses[1] == pytest.approx(local_loss, abs=1e-5)

    logged = [r for r in runs.read_metrics(ray_run) if "test_accuracy" in r][-1]
    evaluated = distcore("evaluate", "--run-dir", str(ray_run), "--no-strategy", "--json")
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    assert json.loads(evaluated.stdout.splitlines()[-1])["accuracy"] == pytest.approx(logged["test_accuracy"], abs=1e-6)


@pytest.mark.slow
def test_sigterm_to_the_driver_stops_the_ray_workers_with_a_checkpoint(tmp_path):
    run = tmp_path / "run"
    driver = subprocess.Popen(
        [sys.executable, "-m", "distcore", "train", "--engine", "ray", "--workers", "2", "--run-dir", str(run),
         "--epochs", "50", *SMALL],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert wait_for(lambda: any("loss" in r for r in runs.read_metrics(run)), timeout=120)
        driver.send_signal(signal.SIGTERM)
        out, err = driver.communicate(timeout=120)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    assert driver.returncode == 128 + signal.SIGTERM, err[-2000:]
    status = runs.read_status(run)
    assert status["state"] == "stopped"
    assert runs.list_checkpoints(run)[-1] == f"ckpt-{status['step']}"
    leftover = subprocess.run(["pgrep", "-f", f"run-dir {run}"], capture_output=True, text=True).stdout.split()
    assert leftover == []
