"""Comparing runs, without Gradio or TensorFlow: the table, smoothing, the x-axes, the settings
that differ, the CSV, the figures, and renaming, deleting and noting runs by name only."""

import csv
import json
import os
import subprocess
import sys
import time
import types

import pytest

from distcore import compare, compareplots, manage, runs
from distcore.config import DistcoreError

T0 = 1_700_000_000.0


def write_run(root, name, replicas=1, batch=64, steps=20, per_loop=5, accuracy=0.7, epoch=True, workers=1):
    """A finished run's folder as distcore writes it: config.json, status.json, metrics.jsonl."""
    folder = root / name
    folder.mkdir(parents=True)
    devices = [f"cpu:{i}" for i in range(replicas)]
    config = {
        "devices": devices,
        "model": "cnn",
        "global_batch": batch,
        "policy": "auto",
        "workers": workers,
        "epochs": 1,
        "max_steps": steps,
        "seed": 0,
        "learning_rate": 0.001,
    }
    (folder / "config.json").write_text(json.dumps(config))
    records = [{"event": "start", "step": 0, "message": "", "time": T0}]
    for s in range(1, steps + 1):
        t = T0 + 1 + (s - 1) // per_loop  # a loop's records share its time
        rate = {} if s == 1 else {"examples_per_sec": 1000.0 * replicas}
        records.append({"step": s, "epoch": 1, "loss": 2.0 / s, "examples": batch, "time": t, **rate})
    if epoch:
        records.append(
            {
                "epoch": 1,
                "step": steps,
                "train_loss": 0.5,
                "train_accuracy": 0.6,
                "test_loss": 0.6,
                "test_accuracy": accuracy,
                "time": T0 + 10,
            }
        )
    records.append({"event": "finished", "step": steps, "message": "", "time": T0 + 11})
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (folder / "status.json").write_text(json.dumps({"state": "finished", "step": steps, "pid": 1, "time": T0 + 11}))
    return folder


def test_smoothing_is_tensorboards_debiased_average():
    assert compare.smooth([1.0, 2.0, 3.0], 0) == [1.0, 2.0, 3.0]
    out = compare.smooth([1.0, 1.0, 1.0], 0.9)
    assert out == pytest.approx([1.0, 1.0, 1.0])  # debiased: a constant stays itself from the first point
    w = 0.6
    first, second = compare.smooth([2.0, 4.0], w)
    assert first == pytest.approx(2.0)
    assert second == pytest.approx(((1 - w) * 2 * w + (1 - w) * 4) / (1 - w**2))
    assert compare.smooth([1.0, float("nan"), 3.0], 0.5)[1] != compare.smooth([1.0, float("nan"), 3.0], 0.5)[1]
    for bad in (-0.1, 1.0, "x"):
        with pytest.raises(DistcoreError, match="smoothing"):
            compare.smooth([1.0], bad)


def test_x_axes_step_examples_and_wall_time(tmp_path):
    folder = write_run(tmp_path, "a", batch=32, steps=10, per_loop=5)
    metrics = runs.read_metrics(folder)
    assert compare.loss_series(metrics, "step")["x"] == list(range(1, 11))
    assert compare.loss_series(metrics, "examples")["x"] == [32 * s for s in range(1, 11)]
    times = compare.loss_series(metrics, "time")["x"]
    assert times == sorted(times) and len(set(times)) == 10  # a loop's steps spread over its time
    assert times[4] == pytest.approx(1.0) and times[9] == pytest.approx(2.0)
    with pytest.raises(DistcoreError, match="x-axis"):
        compare.loss_series(metrics, "epochs")


def test_table_differences_and_csv(tmp_path):
    write_run(tmp_path, "one", replicas=1, batch=64, accuracy=0.71)
    time.sleep(0.01)
    write_run(tmp_path, "two", replicas=2, batch=128, accuracy=0.69)
    manage.write_notes(tmp_path, "two", "batch 128 on two")
    rows = {r["name"]: r for r in compare.table(tmp_path)}
    assert rows["two"]["replicas"] == 2 and rows["two"]["global_batch"] == 128
    assert rows["two"]["test_accuracy"] == 0.69 and rows["two"]["notes"] == "batch 128 on two"
    assert rows["one"]["examples_per_sec"] == pytest.approx(1000.0) and rows["one"]["wall_seconds"] == 11
    assert set(compare.default_picks(tmp_path)) == {"one", "two"}
    result = compare.comparison(tmp_path, ["one", "two"], "examples", 0.5)
    assert {d["field"] for d in result["differences"]} == {"devices", "global_batch"}
    diff = next(d for d in result["differences"] if d["field"] == "global_batch")
    assert diff["one"] == 64 and diff["two"] == 128
    path = compare.write_csv(result, tmp_path / "c.csv")
    rows = list(csv.DictReader(path.open()))
    assert {r["run"] for r in rows} == {"one", "two"} and {r["kind"] for r in rows} == {"step", "epoch"}
    fig = compareplots.loss_figure(result, log_y=True)
    named = [t.name for t in fig.data if t.showlegend is not False]
    assert named == ["one", "two"] and fig.layout.yaxis.type == "log"
    assert list(fig.layout.yaxis.ticktext) == ["0.1", "0.2", "0.3", "0.5", "1", "2"]  # not "1, 2, 3, 5, 1, 2"
    assert fig.layout.xaxis.title.text == "examples seen"
    assert len(compareplots.loss_figure(compare.comparison(tmp_path, ["one"], "step", 0)).data) == 1  # raw only
    for figure in (compareplots.epoch_figure, compareplots.speed_figure):
        assert [t.name for t in figure(result).data if t.showlegend is not False] == ["one", "two"]
    empty = compareplots.system_figure(result)  # no system.jsonl written here
    assert [a.text for a in empty.layout.annotations][-2:] == ["no samples yet"] * 2
    assert not any(t.x for t in empty.data)


def test_the_time_axis_counts_training_and_the_speed_line_breaks_where_a_run_was_stopped():
    def step(n, t):
        return {"step": n, "epoch": 1, "examples": 64, "loss": 1.0, "time": t, "examples_per_sec": 100.0 * n}

    metrics = [
        {"event": "start", "step": 0, "time": 100.0},
        step(1, 101.0),
        step(2, 102.0),
        {"event": "stopped", "step": 2, "time": 102.5},
        {"event": "resume", "step": 2, "time": 150.0, "message": "resumed from ckpt-2 at step 2"},
        step(3, 152.0),
    ]
    # 47.5 s stopped are not training time: the resumed process goes on from 2.5 s.
    assert compare.speed_series(metrics) == {"x": [1.0, 2.0, 2.5, 4.5], "y": [100.0, 200.0, None, 300.0]}
    assert compare.loss_series(metrics, "time")["x"] == [1.0, 2.0, 4.5]
    assert compare.wall_seconds(metrics) == 4.5
    samples = [{"time": t, "cpu_percent": 90.0} for t in (101.0, 149.0, 151.0)]  # 149: the resumed process's set-up
    assert [r["time"] for r in compare.on_training_clock(samples, metrics)] == [1.0, 2.5, 3.5]  # System's x
    # Resumed and not timed yet: the line ends where it was, with nothing to break.
    assert compare.speed_series(metrics[:-1]) == {"x": [1.0, 2.0], "y": [100.0, 200.0]}
    # A resumed process's first loop of 3 steps is spread over its own time, not the idle time before it.
    later = [*metrics[:-1], *({**step(n, 156.0), "examples_per_sec": 300.0} for n in (3, 4, 5))]
    assert compare.loss_series(later, "time")["x"] == [1.0, 2.0, 4.5, 6.5, 8.5]


def test_picks_are_names_inside_the_runs_folder(tmp_path):
    write_run(tmp_path, "one")
    for bad in ("../one", "/etc", "..", "nope"):
        with pytest.raises(DistcoreError):
            compare.comparison(tmp_path, [bad])


@pytest.fixture
def two_runs(tmp_path):
    root = tmp_path / "runs"
    write_run(root, "one")
    write_run(root, "two")
    return root


def test_rename_and_delete(two_runs):
    record = {"sweep": "s", "state": "finished", "runs": ["one", "two"], "entries": [{"run": "one"}, {"run": "two"}]}
    runs.write_json_atomic(two_runs / "s.sweep.json", record)
    assert manage.rename_run(two_runs, "one", "first") == {"renamed": "one", "to": "first"}
    renamed = runs.read_json(two_runs / "s.sweep.json")  # the sweep lists it by its new name
    assert renamed["runs"] == ["first", "two"] and [e["run"] for e in renamed["entries"]] == ["first", "two"]
    assert (two_runs / "first" / "metrics.jsonl").is_file() and not (two_runs / "one").exists()
    with pytest.raises(DistcoreError, match="taken"):
        manage.rename_run(two_runs, "first", "two")
    assert manage.delete_run(two_runs, "two") == {"deleted": "two"}
    assert not (two_runs / "two").exists()


def test_rename_and_delete_refuse_what_is_outside_or_not_a_run(two_runs, tmp_path):
    outside = tmp_path / "outside"
    write_run(tmp_path, "outside")
    (two_runs / "link").symlink_to(outside)
    (two_runs / "plain").mkdir()
    for name in ("..", "../outside", str(outside), "link", "plain", "missing", "one/..", ""):
        with pytest.raises(DistcoreError):
            manage.delete_run(two_runs, name)
        with pytest.raises(DistcoreError):
            manage.rename_run(two_runs, name, "fresh")
    for new in ("..", "../escaped", str(tmp_path / "abs"), "a/b", "link"):
        with pytest.raises(DistcoreError):
            manage.rename_run(two_runs, "one", new)
    assert (outside / "config.json").is_file() and (two_runs / "one").is_dir() and (two_runs / "link").is_symlink()
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "abs").exists()
    for name in ("", None):  # nothing picked on the page: it says so, not that '' is a bad name
        with pytest.raises(DistcoreError, match="^no run is picked: pick the run to rename, delete or note"):
            manage.delete_run(two_runs, name)
        with pytest.raises(DistcoreError, match="^no run is picked"):
            manage.write_notes(two_runs, name, "x")


def test_a_running_run_is_refused(two_runs):
    """A live `distcore train` process for the run (as jobs.job_pid recognises it) blocks both."""
    run_dir = two_runs / "one"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time; time.sleep(30)",
            "-m",
            "distcore",
            "train",
            "--run-dir",
            str(run_dir.resolve()),
        ]
    )
    try:
        (run_dir / "job.json").write_text(json.dumps({"pid": proc.pid, "started": time.time()}))
        deadline = time.monotonic() + 5
        while not (manage.jobs.job_pid(run_dir) or time.monotonic() > deadline):
            time.sleep(0.02)
        for action in (lambda: manage.delete_run(two_runs, "one"), lambda: manage.rename_run(two_runs, "one", "x")):
            with pytest.raises(DistcoreError, match="is training"):
                action()
        from webapp import compare as page  # the page's Delete refuses at once, before asking to confirm

        message, armed = page.delete_run(types.SimpleNamespace(runs_root=two_runs), "one")
        assert "is training" in message and armed is None
    finally:
        proc.kill()
        proc.wait()
    assert run_dir.is_dir()
    manage.delete_run(two_runs, "one")  # its process gone, it goes


def test_notes(two_runs):
    assert manage.write_notes(two_runs, "one", "  lr 1e-3  ")["notes"] == "lr 1e-3"
    assert manage.read_notes(two_runs / "one") == "lr 1e-3"
    with pytest.raises(DistcoreError, match="at most"):
        manage.write_notes(two_runs, "one", "x" * 501)
    (two_runs / "target").write_text("keep")
    os.remove(two_runs / "one" / "notes.txt")
    (two_runs / "one" / "notes.txt").symlink_to(two_runs / "target")
    manage.write_notes(two_runs, "one", "new")  # the link is replaced, not written through
    assert (two_runs / "target").read_text() == "keep" and manage.read_notes(two_runs / "one") == "new"
    manage.write_notes(two_runs, "one", "")
    assert not (two_runs / "one" / "notes.txt").exists()


def test_cli_runs_list_rename_delete(two_runs, capsys):
    from distcore import cli

    typo = two_runs.parent / "rnus"
    assert cli.main(["runs", "list", "--runs-dir", str(typo)]) == 2 and not typo.exists()  # not made
    assert f"there is no runs folder {typo}" in capsys.readouterr().err

    assert cli.main(["runs", "rename", "one", "uno", "--runs-dir", str(two_runs)]) == 0
    assert cli.main(["runs", "delete", "../uno", "--runs-dir", str(two_runs)]) == 2
    assert cli.main(["runs", "notes", "uno", "hello", "--runs-dir", str(two_runs)]) == 0
    assert cli.main(["runs", "list", "--json", "--runs-dir", str(two_runs)]) == 0
    assert cli.main(["runs", "delete", "uno", "--runs-dir", str(two_runs)]) == 0
    assert sorted(p.name for p in two_runs.iterdir() if p.is_dir()) == ["two"]


def write_gan_run(root, name, steps=8):
    """A finished GAN run's folder: its steps carry d_loss and g_loss, its epoch the train and test ones."""
    folder = root / name
    folder.mkdir(parents=True)
    config = {"devices": ["cpu:0", "cpu:1"], "task": "gan", "model": "cnn", "global_batch": 64, "workers": 1}
    (folder / "config.json").write_text(json.dumps(config))
    records = [{"event": "start", "step": 0, "message": "", "time": T0}]
    for s in range(1, steps + 1):
        rate = {} if s == 1 else {"examples_per_sec": 500.0}
        loss = {"d_loss": 0.7 - s / 100, "g_loss": 0.8 - s / 100}
        records.append({"step": s, "epoch": 1, **loss, "examples": 64, "time": T0 + s, **rate})
    losses = {"train_d_loss": 0.66, "train_g_loss": 0.76, "test_d_loss": 0.65, "test_g_loss": 0.75}
    records += [
        {"epoch": 1, "step": steps, **losses, "time": T0 + 20},
        {"event": "finished", "step": steps, "message": "", "time": T0 + 21},
    ]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (folder / "status.json").write_text(json.dumps({"state": "finished", "step": steps, "pid": 1, "time": T0 + 21}))
    return folder


def test_a_gan_run_is_compared_by_its_own_losses_beside_a_classifier(tmp_path):
    from distcore import follow, jobs

    write_run(tmp_path, "clf")
    write_gan_run(tmp_path, "gan")
    result = compare.comparison(tmp_path, ["clf", "gan"], "step", 0)
    gan = result["runs"][1]
    assert gan["loss"]["x"] == [] and list(gan["scalars"]) == ["d_loss", "g_loss"]
    assert gan["scalars"]["g_loss"]["x"] == list(range(1, 9)) and gan["scalars"]["d_loss"]["raw"][0] == 0.7 - 1 / 100
    assert result["runs"][0]["scalars"] == {}  # a classifier: its loss only, as before
    names = [t.name for t in compareplots.loss_figure(result).data]
    assert names == ["clf", "gan · d_loss", "gan · g_loss"]
    epochs = compareplots.epoch_figure(result)
    assert [(t.name, t.xaxis) for t in epochs.data] == [
        ("clf", "x"),
        ("clf", "x2"),
        ("gan · d_loss", "x2"),
        ("gan · g_loss", "x2"),
    ]
    assert list(epochs.data[3].y) == [0.75]  # a GAN has no accuracy: its test losses only
    rows = {row["name"]: row for row in compare.table(tmp_path)}
    assert (rows["gan"]["task"], rows["gan"]["test_accuracy"], rows["gan"]["steps"]) == ("gan", None, 8)
    assert rows["gan"]["examples_per_sec"] == 500.0 and rows["clf"]["task"] == "classifier"
    assert (rows["gan"]["model"], rows["clf"]["model"]) == (None, "cnn")  # a GAN's config keeps model's default
    lines = list(csv.DictReader(compare.write_csv(result, tmp_path / "c.csv").open()))
    gan_steps = [r for r in lines if r["run"] == "gan" and r["kind"] == "step"]
    assert len(gan_steps) == 8 and float(gan_steps[0]["d_loss"]) == 0.7 - 1 / 100 and gan_steps[0]["g_loss"]
    assert [r["test_d_loss"] for r in lines if r["run"] == "gan" and r["kind"] == "epoch"] == ["0.65"]
    assert lines[0]["run"] == "clf" and lines[0]["loss"] == "2.0"
    # /run_status and the status line: its newest step's losses, its speed, its step count.
    record = follow.run_record(tmp_path, "gan")
    assert record["latest_step"] == {"step": 8, "epoch": 1, "d_loss": 0.7 - 8 / 100, "g_loss": 0.8 - 8 / 100}
    assert record["latest_epoch"]["test_g_loss"] == 0.75 and record["examples_per_sec"] == 500.0
    assert jobs.job_progress(tmp_path / "gan").step == 8
