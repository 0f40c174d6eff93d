"""`distcore.train` as a notebook calls it, in a folder of its own, and the runs it leaves for the CLI."""

import json
import os
import subprocess
import sys

import pytest

import distcore

pytestmark = pytest.mark.slow  # each test starts TensorFlow processes

NOTEBOOK = """
import numpy as np, keras, distcore

rng = np.random.default_rng(0)
x_train, x_test = rng.normal(size=(320, 8)), rng.normal(size=(80, 8))
label = lambda x: (x[:, 0] > 0).astype(int) + (x[:, 1] > 0)
y_train, y_test = label(x_train), label(x_test)

def make_model():
    return keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(3)])
data = distcore.Arrays(x_train, y_train, x_test, y_test)          # numpy; labels 0..2
run = distcore.train(distcore.Classifier(make_model), data, run_dir="runs/mine",
                     devices=2, global_batch=32, max_steps=20, seed=1)   # devices: a count or names
print("RECORDS", len(run.records), run.records[-1]["event"])
print("EVALUATED", distcore.evaluate("runs/mine", devices=None)["accuracy"])
print("EXPORTED", distcore.export("runs/mine", "mine.keras")["path"])
"""


def run(command, cwd, timeout=300):
    # The package as installed (editable, by the README's set-up), imported from another folder.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


def said(stdout: str, word: str) -> str:
    return next(line.split(" ", 1)[1] for line in stdout.splitlines() if line.startswith(word))


def test_the_contract_runs_as_written_from_a_notebooks_folder(tmp_path):
    (tmp_path / "notebook.py").write_text(NOTEBOOK)
    done = run([sys.executable, "notebook.py"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert said(done.stdout, "RECORDS").endswith("finished")
    accuracy = float(said(done.stdout, "EVALUATED"))
    assert (tmp_path / "mine.keras").is_file()
    config = json.loads((tmp_path / "runs" / "mine" / "config.json").read_text())
    assert config["model"] == "saved" and config["data"] == "arrays"  # a notebook's factory: its architecture kept
    # Another process, with no notebook, evaluates and exports the run from its folder alone.
    cli = [sys.executable, "-m", "distcore"]
    evaluated = run([*cli, "evaluate", "--run-dir", "runs/mine", "--no-strategy", "--json"], cwd=tmp_path)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert json.loads(evaluated.stdout)["accuracy"] == pytest.approx(accuracy, abs=1e-9)
    exported = run(
        [*cli, "export", "--run-dir", "runs/mine", "--checkpoint", "ckpt-10", "--out", "ten.keras", "--json"], tmp_path
    )
    assert exported.returncode == 0, exported.stderr[-3000:]
    assert json.loads(exported.stdout) == {
        "path": str(tmp_path / "ten.keras"),
        "format": "keras",
        "checkpoint": "ckpt-10",
        "step": 10,
        "task": "classifier",
    }
    again = run([*cli, "export", "--run-dir", "runs/mine", "--out", "ten.keras", "--json"], tmp_path)
    assert again.returncode == 2 and "already exists" in json.loads(again.stdout)["error"]


def test_the_cli_trains_the_gan_with_both_losses_in_its_records(tmp_path):
    flags = ["--replicas", "2", "--max-steps", "4", "--train-examples", "256", "--test-examples", "64", "--json"]
    done = run([sys.executable, "-m", "distcore", "train", "--task", "gan", "--run-dir", "g", *flags], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    records = [json.loads(line) for line in done.stdout.splitlines()]
    steps = [r for r in records if "d_loss" in r and "examples" in r]
    assert [r["step"] for r in steps] == [1, 2, 3, 4] and all("g_loss" in r for r in steps)
    assert "remapper failed" not in done.stderr  # the run's log shows no grappler error


def test_an_unknown_setting_is_named_with_the_ones_there_are(tmp_path):
    with pytest.raises(distcore.DistcoreError, match=r"no setting max_step \(did you mean max_steps\?\): the settings"):
        distcore.train("classifier", None, tmp_path / "run", devices=1, max_step=3)
    assert not (tmp_path / "run").exists()
