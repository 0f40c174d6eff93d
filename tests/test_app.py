"""The app's handlers (webapp.*), called directly: inputs -> outputs, bad input -> a clear message."""

import csv
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import gradio as gr
import pytest

import webapp.evaluate as evaluate_tab
from conftest import fill_disk, tmpfs, wait_for
from distcore import data, explain, follow, forms, jobs, plots, runs, verdicts
from distcore.config import DistcoreError
from webapp import format as fmt, hosting, loss, settings as appsettings, setup, shell, train, trainapi, watch

REPO = Path(__file__).resolve().parent.parent
CPU_ONLY = {"tensorflow": "2.21.0", "gpus": [], "cpus": 1, "max_logical_cpus": 16}
BAD_NAMES = ["../x", "/etc", "a/b", "..", "x/../../etc", ""]


def form(count=2, batch=64, train_examples=2048, max_steps=20, epochs=1, **over):
    """The Setup tab's training inputs, in _train_form order."""
    values = dict(
        count=count,
        boxes=[],
        batch=batch,
        policy="auto",
        api="dataset",
        model="cnn",
        optimizer="adam",
        lr=0.001,
        epochs=epochs,
        max_steps=max_steps,
        steps_per_loop=5,
        ckpt_every=0,
        seed=0,
        train_examples=train_examples,
        test_examples=500,
        drop=False,
        workers=1,
        ckpt_keep=0,
    )
    values.update(over)
    return list(values.values())


@pytest.fixture
def settings(tmp_path):
    return appsettings.make_settings(tmp_path / "runs", max_jobs=1, devices_info=CPU_ONLY)


@pytest.fixture(scope="module")
def planner():
    p = jobs.Planner()
    yield p
    p.close()


def is_error(md) -> bool:
    return isinstance(md, str) and "dc-error" in md


def test_app_never_imports_tensorflow(tmp_path):
    code = (
        "import sys, app; app.build_app(runs_root=sys.argv[1], devices_info={'gpus': []}); "
        "assert 'tensorflow' not in sys.modules, 'tensorflow was imported'"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=REPO, check=True, timeout=120)


def test_build_app_gpu_and_cpu_layouts(tmp_path):
    for info in (CPU_ONLY, {**CPU_ONLY, "gpus": ["gpu:0", "gpu:1"]}):
        demo = shell.build_app(runs_root=tmp_path, devices_info=info, planner=jobs.Planner())
        assert isinstance(demo, gr.Blocks)
        labels = {getattr(b, "value", None) for b in demo.blocks.values() if isinstance(b, gr.Button)}
        assert {"Start training", "Stop training", "Resume", "Evaluate checkpoint", "Check loss scaling"} <= labels


def test_selected_devices(settings):
    assert forms.selected_devices(settings.gpus, 3, []) == ("cpu:0", "cpu:1", "cpu:2")
    gpu = appsettings.make_settings(settings.runs_root, devices_info={**CPU_ONLY, "gpus": ["gpu:0", "gpu:1"]})
    assert forms.selected_devices(gpu.gpus, None, ["gpu:1", "gpu:0"]) == ("gpu:1", "gpu:0")
    with pytest.raises(DistcoreError, match="one kind"):
        forms.selected_devices(gpu.gpus, None, ["gpu:1", "cpu:0"])
    for bad in ((gpu, None, []), (settings, None, []), (settings, 0, [])):
        with pytest.raises(DistcoreError, match="empty"):
            forms.selected_devices(bad[0].gpus, *bad[1:])


def test_batch_note(settings):
    assert "Per-replica batch: **32**" in setup.batch_note(settings, 64, 2, [])
    assert "does not divide evenly by 3 replicas** (64 / 3 replicas ≈ 21.333)" in setup.batch_note(settings, 64, 3, [])
    # Its example names both of TensorFlow's cuts (tests/test_split.py checks them); 2/2/0 alone
    # would contradict the split shown under it with drop_remainder.
    assert (
        "4 over 3 replicas is 2/2/0, or 2/1/1 under FILE and OFF with drop_remainder. distribute_datasets_from_"
        "function refuses a global batch that does not divide evenly." in setup.batch_note(settings, 64, 3, [])
    )
    assert "(1 / 8 replicas = 0.125)" in setup.batch_note(settings, 1, 8, [])  # not 0.12
    assert "**4 examples for 8 replicas** (4 / 8 replicas = 0.5): at each step 4 of them get an empty batch" in (
        setup.batch_note(settings, 4, 8, [])
    )  # 1/1/1/1/0/0/0/0
    # 12 over 8 is 2/2/2/2/2/2/0/0: the two replicas always empty are named, not just "unequal batches"
    assert "some may get an empty one at every step" in setup.batch_note(settings, 12, 8, [])
    assert is_error(setup.batch_note(settings, 0, 2, []))
    assert is_error(setup.batch_note(settings, -8, 2, []))
    assert is_error(setup.batch_note(settings, 64, None, []))


def split(settings, planner, n, g, r, **kw):
    args = dict(
        source=setup.TOY,
        toy_examples=n,
        train_examples=60000,
        global_batch=g,
        cpu_count=r,
        gpu_boxes=[],
        policy="auto",
        api="dataset",
        drop_remainder=False,
        files=0,
        workers=1,
        seed=0,
    )
    args.update(kw)
    return setup.show_split(settings, planner, *args.values())


def test_show_split_seed_examples(settings, planner):
    fig, text, plan = split(settings, planner, 6, 4, 2)
    assert [list(r) for r in fig.data[0].text] == [["0,1", "2,3"], ["4", "5"]]
    assert "split 1/1" in plan["headline"] and text.startswith(plan["headline"])  # the headline, details folded
    assert plan["steps"] == [[[0, 1], [2, 3]], [[4], [5]]] and plan["replicas"] == 2
    fig, text, plan = split(settings, planner, 4, 4, 5)
    assert fig.data[0].text[0][4] == "empty" and "Replica 4 got nothing" in plan["headline"]
    fig, text, _ = split(settings, planner, 8, 4, 3)
    assert [list(r) for r in fig.data[0].text] == [["0,1", "2,3", "empty"], ["4,5", "6,7", "empty"]]
    started = time.monotonic()
    fig, _, _ = split(settings, planner, 150, 64, 2, drop_remainder=True)
    assert len(fig.data[0].z) == 2
    assert time.monotonic() - started < 3, "the persistent planner answers small plans fast"


@pytest.mark.parametrize(
    "n,g,r,kw,message",
    [
        (6, 0, 2, {}, "global batch size"),
        (6, -4, 2, {}, "global batch size"),
        (6, 4, None, {}, "device set is empty"),
        (6, 8, 2, {}, "larger than the dataset"),
        (6, 4, 3, {"api": "function"}, "divide evenly"),
        (6, 4, 2, {"policy": "bogus"}, "shard policy"),
        # One range for the seed, whatever is wrong: not "from 0 up" for -1 and "from 0 to 2147483647" for a huge one.
        (6, 4, 2, {"source": setup.FASHION, "seed": -1}, "a whole number from 0 to 2147483647"),
    ],
)
def test_show_split_bad_input(settings, planner, n, g, r, kw, message):
    fig, text, plan = split(settings, planner, n, g, r, **kw)
    assert fig is None and is_error(text) and message in text and message in plan["error"]


@pytest.mark.parametrize(
    "over,message",
    [
        ({"batch": 0}, "global batch size"),
        ({"batch": -64}, "global batch size"),
        ({"count": None}, "device set is empty"),
        ({"batch": 4096}, "larger than the training set"),
        ({"lr": None}, "learning rate"),
    ],
)
def test_start_run_bad_input_starts_nothing(settings, over, message):
    text, dropdown = train.start_run(settings, threading.Lock(), "bad", *form(**over))
    assert is_error(text) and message in text
    assert not (settings.runs_root / "bad").exists()


@pytest.mark.parametrize("name", ["../x", "/etc", "a/b", "x/../../etc"])
def test_start_run_refuses_malicious_names(settings, name):
    text, _ = train.start_run(settings, threading.Lock(), name, *form())
    assert is_error(text) and "not allowed" in text
    assert not any(settings.runs_root.iterdir())


@pytest.mark.slow
def test_what_was_typed_is_shown_as_text_not_html(settings):
    # A run name of <img src=x onerror=...> rendered as an image in its own refusal.
    text, _ = train.start_run(settings, threading.Lock(), "<img src=x onerror=alert(1)>", *form())
    assert "&lt;img src=x onerror=alert(1)&gt;" in text and "<img" not in text
    # An empty loss-scaling seed is 0, as Setup's is, within the same range.
    assert loss.loss_check(settings, 1, [], 8, 2**31)[0] == fmt.error_md(
        "seed (2147483648) must be a whole number from 0 to 2147483647."
    )
    assert "Single device (reference)" in loss.loss_check(settings, 1, [], 8, None)[0]


@pytest.mark.parametrize("name", BAD_NAMES + ["no-such-run"])
def test_run_handlers_refuse_bad_or_unknown_names(settings, name):
    assert is_error(train.stop_run(settings, name))
    assert is_error(train.resume_run(settings, threading.Lock(), name, *form())[0])
    assert is_error(watch.run_view(settings, name)[0]) or not name
    assert is_error(train.export_run(settings, name)[1])
    assert is_error(evaluate_tab.evaluate(settings, name, "ckpt-1", evaluate_tab.NO_STRATEGY, 2, [])[0])
    assert watch.checkpoint_dropdown(settings, name)["choices"] == []


def test_handlers_ask_for_a_run_when_none_is_picked(settings):
    assert "choose a run first" in train.stop_run(settings, None)
    assert "choose a run first" in evaluate_tab.evaluate(settings, None, None, evaluate_tab.NO_STRATEGY, 2, [])[0]
    assert "No run selected yet" in watch.run_view(settings, None)[0]


def test_evaluate_a_run_with_no_checkpoints_says_so(settings):
    (settings.runs_root / "fresh").mkdir(parents=True)
    assert (
        "has no checkpoints yet" in evaluate_tab.evaluate(settings, "fresh", None, evaluate_tab.NO_STRATEGY, 2, [])[0]
    )
    # Stopped at step 0 after it saved its settings: no "yet", which would say to wait for a checkpoint
    # that never comes.
    (settings.runs_root / "fresh" / "config.json").write_text("{}")
    runs.write_json_atomic(settings.runs_root / "fresh" / "status.json", {"state": "stopped", "step": 0})
    md = evaluate_tab.evaluate(settings, "fresh", None, evaluate_tab.NO_STRATEGY, 2, [])[0]
    assert is_error(md) and "run fresh stopped before its first checkpoint: resuming it trains it from step 0" in md


@pytest.mark.slow
def test_evaluate_a_run_whose_data_folder_is_gone_reads_the_data_from_here_and_says_so(settings, tmp_path):
    # A run trained with --data-dir, copied to another machine, can be evaluated in the app,
    # which has no data folder field (no "pass --data-dir ...").
    from distcore import data

    theirs = tmp_path / "their-data"
    theirs.mkdir()
    here = data.locate(download=False)
    for name in data.FILES.values():
        (theirs / name).symlink_to(here / name)
    run_dir = settings.runs_root / "copied"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "distcore",
            "train",
            "--run-dir",
            str(run_dir),
            "--data-dir",
            str(theirs),
            "--replicas",
            "2",
            "--train-examples",
            "640",
            "--test-examples",
            "200",
            "--steps-per-loop",
            "5",
        ],
        cwd=REPO,
        check=True,
        timeout=300,
        capture_output=True,
    )
    for name in data.FILES.values():
        (theirs / name).unlink()
    md, figure, gallery, _ = evaluate_tab.evaluate(settings, "copied", "ckpt-10", evaluate_tab.NO_STRATEGY, 2, [])
    assert md.startswith("### Accuracy ") and figure is not None and len(gallery) == 16, md
    assert (
        f"Note: the run's data folder {theirs} (its data_dir in {run_dir / 'config.json'}) lacks "
        f"{', '.join(data.FILES.values())}; read Fashion-MNIST from {here} instead."
    ) in md


@pytest.mark.slow
def test_a_full_gradio_temporary_folder_is_said_and_the_evaluation_still_shows(settings, tmp_path, monkeypatch):
    # Gradio copies the gallery's images and the exported files into its temporary folder as it
    # answers; when that disk is full, the result still shows, not a bare "Error" in each output.
    run_dir = settings.runs_root / "small"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "distcore",
            "train",
            "--run-dir",
            str(run_dir),
            "--replicas",
            "2",
            "--train-examples",
            "640",
            "--test-examples",
            "200",
            "--steps-per-loop",
            "5",
        ],
        cwd=REPO,
        check=True,
        timeout=300,
        capture_output=True,
    )
    with tmpfs(tmp_path / "disk", "size=1m") as mount:
        monkeypatch.setenv("GRADIO_TEMP_DIR", str(mount / "gradio"))
        assert hosting.gradio_room(1000) is None
        fill_disk(mount)
        md, figure, gallery, _ = evaluate_tab.evaluate(settings, "small", "ckpt-10", evaluate_tab.NO_STRATEGY, 2, [])
        full = f"Gradio's temporary folder {mount / 'gradio'} cannot take them (No space left on device)."
        assert md.startswith("### Accuracy ") and figure is not None and gallery == []
        assert md.endswith(f"Note: The test images are not shown: {full}")
        assert train.export_run(settings, "small") == (
            None,
            fmt.error_md(f"cannot hand the export to the browser: {full}"),
        )


def test_a_run_with_damaged_files_is_shown_as_damaged(settings):
    # A status.json step of "abc", config.json devices of 5 or bytes that are not UTF-8 in
    # metrics.jsonl do not fail the whole view (Gradio's "Error"), which would leave the page
    # showing the run followed before.
    run_dir = settings.runs_root / "d5"
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps({"devices": 5, "workers": "x"}))
    (run_dir / "status.json").write_text(json.dumps({"state": 5, "step": "abc"}))
    (run_dir / "metrics.jsonl").write_bytes(
        b'{"step": "x", "loss": 1}\n\xff\xfe\n{"step": 1, "loss": 2.0, "examples": 64}\n'
    )
    text, loss, epochs, log = watch.run_view(settings, "d5")
    assert text.startswith("**d5** · **unknown** · step 1 ") and "config.json is incomplete or damaged" in text
    assert loss is not None and epochs is not None


@pytest.mark.slow
def test_loss_check(settings):
    text, answer = loss.loss_check(settings, 2, [], 64, 0)
    assert "64 examples cut 32 + 32 over 2 replicas" in text
    assert (answer["global_batch"], answer["examples"], answer["replicas"]) == (64, 64, 2)
    assert answer["per_replica_examples"] == [32, 32]
    methods = {m["key"]: m for m in answer["methods"]}
    assert "Mistake: reduce_mean per replica" in text and not methods["mistake_reduce_mean"]["ok"]
    assert "| ✓ | Distributed step" in text and methods["distributed"]["ok"]
    # The distributed loss is the single device's up to float32 rounding: the replicas' partial
    # sums are added in another order, and on some CPUs (Zen 3: 2.304583 against 2.304582) that
    # moves the last digit. A few float32 ulps (2**-23 each, relative) is the bound, as in
    # tests/test_losscheck.py (rel=1e-5); a wrong scaling is off by a factor, not a digit.
    single = answer["single_device"]
    assert abs(methods["distributed"]["loss"] - single) <= 1e-5 * single, methods["distributed"]
    assert f"| {single:.6f} |" in text  # the table shows the reference's value
    assert is_error(loss.loss_check(settings, 2, [], 0, 0)[0])
    assert is_error(loss.loss_check(settings, None, [], 64, 0)[0])
    # With 3 worker processes Setup counts one replica per worker, and so does the check
    # (the device choice, 4 here, is greyed out there).
    # It says it ran them in one process (it did not).
    three, answer = loss.loss_check(settings, 4, [], 32, 0, 3)
    assert "32 examples cut 11 + 11 + 10 over 3 replicas:" in three
    assert "(3 replicas in one process: the arithmetic of 3 worker processes)" in three
    assert answer["replicas"] == 3 and answer["per_replica_examples"] == [11, 11, 10]
    assert "one process" not in text
    # A partial batch leaving a replica empty: the tutorial's constant is wrong, Keras's default
    # reduction fails (TensorFlow's error in the fold, AddN), the distributed step is right.
    partial, answer = loss.loss_check(settings, 3, [], 6, 0, 1, 4)
    assert "4 examples (a partial batch) cut 2 + 2 + 0 over 3 replicas" in partial
    assert (answer["global_batch"], answer["examples"], answer["per_replica_examples"]) == (6, 4, [2, 2, 0])
    methods = {m["key"]: m for m in answer["methods"]}
    assert methods["keras_default"]["loss"] is None and methods["keras_default"]["verdict"].startswith("fails")
    assert "| ✗ | Keras 3's default reduction | – | fails: TensorFlow cannot add up" in partial and "AddN" in partial
    assert methods["tutorial_fixed_g"]["verdict"] == "wrong: 1.5× too small" and methods["distributed"]["ok"]
    for bad in (7, -1, 2.5):  # the range is the global batch's (not "from 1 to 65536" for 0)
        assert (
            "examples in the batch (%s) must be a whole number from 1 to 6, or 0 for the whole global batch." % bad
            in loss.loss_check(settings, 3, [], 6, 0, 1, bad)[0]
        )
    # 0, as the field comes (Gradio shows and sends an empty Number as 0), is the whole batch,
    # so the tab's first click is not refused.
    assert loss.loss_check(settings, 3, [], 6, 0, 1, 0) == loss.loss_check(settings, 3, [], 6, 0, 1, None)
    text, answer = loss.loss_check(settings, 3, [], 6, 0, 1, 0)
    assert "**6 examples cut 2 + 2 + 2 over 3 replicas:" in text and answer["examples"] == 6


@pytest.mark.slow
def test_train_follow_stop_evaluate_resume_export(settings):
    lock = threading.Lock()
    text, dropdown = train.start_run(settings, lock, "r1", *form(train_examples=60000, max_steps=0))
    assert "Started **r1**" in text and dropdown["value"] == "r1"
    # The job limit (1 here) is told plainly; the first run is untouched.
    text, _ = train.start_run(settings, lock, "r2", *form())
    assert is_error(text) and "allows 1 at a time" in text
    assert follow.default_run(settings.runs_root) == "r1"  # a fresh page follows the running job

    # Polling redraws when the run directory changes, and skips otherwise.
    assert wait_for(lambda: runs.last_logged_step(settings.runs_root / "r1") >= 10)
    status, loss_fig, epoch_fig, logs, _, grid, stop, resume, more, sig = watch.poll_run(settings, "r1", None)
    assert grid["visible"] is False  # a classifier writes no images
    assert "**r1** · **running**" in status and len(loss_fig.data[0].x) >= 10
    # The buttons follow the run: Stop while it trains, no Resume, no "Train more".
    assert (stop["interactive"], resume["interactive"], more["visible"]) == (True, False, False)
    assert "start" in logs
    assert "Setup: cnn · adam · learning rate 0.001 · global batch 64 on cpu:0, cpu:1" in status

    assert (
        "Stopping **r1**: it stops at the end of the current loop (steps per loop: 5 steps; a process's "
        "first loop is its first step), saves a checkpoint and exits."
    ) == train.stop_run(settings, "r1")
    assert jobs.wait_until_done(settings.runs_root / "r1", timeout=120)
    status, *_, stop, resume, more = watch.run_panel(settings, "r1")
    assert "**stopped**" in status and "ckpt-" in status
    assert (stop["interactive"], resume["interactive"], resume["visible"], more["visible"]) == (
        False,
        True,
        True,
        False,
    )
    sig = watch.poll_run(settings, "r1", sig)[-1]
    assert watch.poll_run(settings, "r1", sig) == (gr.skip(),) * watch.PANEL_OUTPUTS + (sig,)  # nothing changed
    ckpt = watch.checkpoint_dropdown(settings, "r1")["value"]
    assert ckpt.startswith("ckpt-")

    md, fig, gallery, result = evaluate_tab.evaluate(settings, "r1", ckpt, evaluate_tab.NO_STRATEGY, 2, [])
    assert md.startswith("### Accuracy") and "no strategy" in md and "500 test images" in md
    assert len(fig.data[0].z) == 10 and len(gallery) == 16
    assert gallery[0][0].shape == (112, 112)
    assert all(c.startswith("✓ ") or (c.startswith("✗ ") and " → " in c) for _, c in gallery)
    # Up to 8 of the test set's mistakes first, then images classified right.
    marks = [c.startswith("✗") for _, c in gallery]
    assert marks == sorted(marks, reverse=True) and sum(marks) == min(8, round((1 - result["accuracy"]) * 500))
    # Evaluated again on 3 devices, it joins this page's table beside the no-strategy row: equal, ✓.
    rows = [verdicts.evaluation_row(result, "r1", evaluate_tab.NO_STRATEGY, [])]
    md, table, confusion, gallery, grid, answer, rows = evaluate_tab.evaluate_and_compare(
        settings, rows, "r1", ckpt, evaluate_tab.ON_DEVICES, 3, []
    )
    assert "cpu:0, cpu:1, cpu:2" in md
    assert table["headers"] == evaluate_tab.TABLE_HEADERS
    assert [(r[2], r[3], r[-2], r[-1]) for r in table["data"]] == [
        ("none", "–", "+0.00 pp", "✓"),
        ("MirroredStrategy", 3, "+0.00 pp", "✓"),
    ]
    assert answer["same"] is True and answer["accuracy"] == result["accuracy"] and len(rows) == 2
    # A classifier has a confusion matrix and test images, no generated images.
    assert (
        confusion["visible"] and gallery["visible"] and grid == {"__type__": "update", "value": None, "visible": False}
    )
    captions = [c for _, c in gallery["value"]]
    assert captions == sorted(captions, key=lambda c: not c.startswith("✗"))  # the mistakes first
    assert is_error(evaluate_tab.evaluate(settings, "r1", "ckpt-999999", evaluate_tab.NO_STRATEGY, 2, [])[0])
    # Evaluate clicked before the checkpoint dropdown was filled in: the newest checkpoint.
    newest = runs.list_checkpoints(settings.runs_root / "r1")[-1]
    md, *_ = evaluate_tab.evaluate(settings, "r1", None, evaluate_tab.NO_STRATEGY, 2, [])
    assert md.startswith("### Accuracy") and f"{newest} (step {runs.checkpoint_step(newest)})" in md
    # Nor the run dropdown (a tab first opened after a reload fills it in at the next tick):
    # the run 2 · Train follows, not "choose a run first".
    md, *_ = evaluate_tab.evaluate(settings, None, None, evaluate_tab.NO_STRATEGY, 2, [], "r1")
    assert md.startswith("### Accuracy") and f"{newest} (step {runs.checkpoint_step(newest)}) of **r1**" in md

    step = runs.checkpoint_step(ckpt)
    text, _ = train.resume_run(settings, lock, "r1", *form(train_examples=60000, max_steps=step + 5))
    assert f"Resuming **r1** from {ckpt}" in text
    assert jobs.wait_until_done(settings.runs_root / "r1", timeout=180)
    status, *_, stop, resume, more = watch.run_panel(settings, "r1")
    assert "**finished**" in status
    # Finished: no Stop, no Resume (it cannot continue as it is); "Train 1 more epoch" instead.
    assert (stop["interactive"], resume["interactive"], resume["visible"], more["visible"]) == (
        False,
        False,
        False,
        True,
    )

    files, msg = train.export_run(settings, "r1")
    csv_path, config_path = map(Path, files)
    assert json.loads(config_path.read_text())["global_batch"] == 64
    rows = list(csv.DictReader(csv_path.open()))
    assert any(r["kind"] == "step" and r["step"] == str(step + 5) for r in rows)


@pytest.mark.slow
def test_a_stop_before_training_promises_no_checkpoint(settings):
    text, _ = train.start_run(settings, threading.Lock(), "quick", *form())
    assert "Started **quick**" in text
    assert "training has not begun, so it exits at step 0 with nothing to save" in train.stop_run(settings, "quick")
    assert jobs.wait_until_done(settings.runs_root / "quick", timeout=60)
    assert runs.read_status(settings.runs_root / "quick")["state"] == "stopped"
    assert runs.list_checkpoints(settings.runs_root / "quick") == []


@pytest.mark.slow
def test_resume_starts_a_run_with_no_checkpoint_from_0_and_refuses_a_finished_one(settings):
    from distcore.config import TrainConfig
    from distcore.controller import Controller, StopFlag

    stop = StopFlag()
    stop.set()  # stopped before its first step: no checkpoint
    config = TrainConfig(devices=("cpu:0",), epochs=1, train_examples=640, test_examples=200, steps_per_loop=5)
    assert Controller(config, settings.runs_root / "early", stop=stop).run()["step"] == 0
    lock = threading.Lock()
    early = form(count=1, train_examples=640, test_examples=200, max_steps=0)
    text, _ = train.resume_run(settings, lock, "early", *early)
    assert "Resuming **early** from step 0 (it has no checkpoint yet)" in text
    assert jobs.wait_until_done(settings.runs_root / "early", timeout=180)
    assert "**finished**" in watch.run_view(settings, "early")[0]
    assert runs.last_logged_step(settings.runs_root / "early") == 10

    text, _ = train.resume_run(settings, lock, "early", *early)  # nothing left to train: no process starts
    assert is_error(text)
    assert "run early already finished at step 10 of 10: its 1 epoch ends there; raise epochs" in text
    assert runs.read_status(settings.runs_root / "early")["state"] == "finished"
    assert jobs.count_running(settings.runs_root) == 0


@pytest.mark.slow
def test_two_worker_processes_split_and_train(settings):
    """The app's workers option: real MultiWorkerMirroredStrategy processes, the same views."""
    fig, text, _ = split(settings, None, 12, 4, 1, policy="data", files=2, workers=2)
    assert list(fig.data[0].text[0]) == ["0,1", "2,3"]  # step 1: worker 0 gets 0,1; worker 1 gets 2,3
    assert "worker 1 · cpu:0" in str(fig.data[0].x) and "DATA sharding" in text
    fig, text, _ = split(settings, None, 12, 4, 1, source=setup.FASHION, train_examples=12, workers=2, seed=5)
    assert list(fig.data[0].text[0]) != ["0,1", "2,3"] and "shuffled with seed 5" in text
    assert "DATA sharding" in text  # read off the positions, which the shuffle leaves as they were
    lock = threading.Lock()
    text, _ = train.start_run(settings, lock, "apart", *form(max_steps=12, workers=2, policy="off"))
    assert is_error(text) and "shard policy OFF cannot train across 2 workers" in text
    assert not (settings.runs_root / "apart").exists()
    text, _ = train.start_run(settings, lock, "pair", *form(max_steps=12, workers=2))
    assert "Started **pair**" in text and "2 worker processes" in text
    assert jobs.wait_until_done(settings.runs_root / "pair", timeout=240)
    status = watch.run_view(settings, "pair")[0]
    assert "**finished**" in status
    assert runs.read_config(settings.runs_root / "pair")["workers"] == 2
    assert runs.last_logged_step(settings.runs_root / "pair") == 12


# ---------------------------------------------------------------- setup, notes and lines of the page


def test_batch_note_counts_worker_processes(settings):
    # 2 logical devices chosen, but 3 worker processes: 3 replicas, one per worker.
    note = setup.batch_note(settings, 64, 2, [], 3)
    assert "does not divide evenly by 3 replicas" in note and "worker process" in note
    assert "Per-replica batch: **32** (64 / 2 replicas: one CPU replica per worker process)" in setup.batch_note(
        settings, 64, 2, [], 2
    )
    count, boxes = setup.devices_in_use(3)
    assert count["interactive"] is False and boxes["interactive"] is False
    assert setup.devices_in_use(1)[0]["interactive"] is True


def test_a_browser_gets_its_setup_back_but_not_values_this_app_does_not_offer():
    import gradio as gr

    fields = {
        "count": gr.Radio(choices=[1, 2, 3], value=2),
        "policy": gr.Radio(list(setup.POLICY_CHOICES)),
        "boxes": gr.CheckboxGroup(choices=["cpu:0"]),
        "epochs": gr.Number(value=1),
        "drop": gr.Checkbox(value=False),
    }
    restore = setup.form_restorer(fields)
    assert restore({"count": 3, "policy": "off", "boxes": ["cpu:0"], "epochs": 7, "drop": True}) == [
        3,
        "off",
        ["cpu:0"],
        7,
        True,
    ]
    skip = gr.skip()
    assert restore({"count": 9, "policy": "sometimes", "boxes": ["gpu:3"], "epochs": "x"}) == [skip] * 5
    # Edited storage: a bool is not a count or a number, a list not a radio choice, a number not a tick.
    assert restore({"count": True, "policy": ["off"], "boxes": "cpu:0", "epochs": True, "drop": 1}) == [skip] * 5
    assert restore(None) == [skip] * 5  # nothing kept yet: the defaults stay


def test_setup_line_names_the_worker_processes():
    line = fmt.config_line({"model": "cnn", "global_batch": 64, "devices": ["cpu:0"], "workers": 2})
    assert "global batch 64 on 2 worker processes (cpu:0 each)" in line
    ray = {"global_batch": 64, "devices": ["cpu:0"], "workers": 2}
    assert "global batch 64 on 2 worker processes on Ray (cpu:0 each) ·" in fmt.config_line(ray, "ray")
    assert "global batch 64 on cpu:0, cpu:1 ·" in fmt.config_line({"global_batch": 64, "devices": ["cpu:0", "cpu:1"]})
    # An L2 weight is in every step's loss (4.14 at step 1 against 2.30): the line said nothing of it.
    assert fmt.config_line({"seed": 0, "l2": 0.01}).endswith("seed 0 · L2 weight 0.01 (in the loss)")
    assert fmt.config_line({"seed": 0, "l2": 0}).endswith("seed 0")


def test_the_checkpoints_line_says_it_shows_the_newest_five_of_more():
    progress = jobs.Progress(
        name="r",
        state="finished",
        active=False,
        step=14,
        total_steps=14,
        epoch=1,
        examples_per_sec=None,
        eta_seconds=None,
        message="",
        log_lines=(),
        checkpoints=tuple(f"ckpt-{i}" for i in range(1, 15)),
    )
    assert "Checkpoints (14, the newest 5 here; all in 3 · Evaluate): ckpt-10, ckpt-11, ckpt-12, ckpt-13, ckpt-14" in (
        fmt.status_md(progress)
    )
    five = fmt.status_md(jobs.Progress(**{**progress.__dict__, "checkpoints": progress.checkpoints[:5]}))
    assert "Checkpoints: ckpt-1, ckpt-2, ckpt-3, ckpt-4, ckpt-5" in five
    # A progress element, which a screen reader reads as one (a bar of ▓ is read block by block).
    halfway = jobs.Progress(**{**progress.__dict__, "step": 7})
    assert "<progress value='7' max='14'></progress> 50%" in fmt.status_md(halfway)


def test_the_speed_says_whether_it_is_the_last_loops_or_the_runs_mean():
    # A finished run's speed is its mean (1,905 examples/s), not its last loop's (4,169), which a student would quote.
    ended = jobs.Progress(
        name="r",
        state="finished",
        active=False,
        step=14,
        total_steps=14,
        epoch=1,
        examples_per_sec=1905.2,
        eta_seconds=None,
        message="",
        log_lines=(),
        checkpoints=(),
    )
    assert "1,905 examples/s (mean)" in fmt.status_md(ended)
    live = jobs.Progress(**{**ended.__dict__, "state": "running", "active": True})
    assert "1,905 examples/s (last loop)" in fmt.status_md(live)


def test_fashion_rows_are_shown_in_the_order_training_reads_them(settings, planner):
    fig, text, _ = split(settings, planner, 6, 4, 2, source=setup.FASHION, train_examples=8, seed=1)
    cells = [c for row in fig.data[0].text for c in row]
    assert cells != ["0,1", "2,3", "4,5", "6,7"]  # the shuffled rows, not positions
    shown = sorted(int(i) for c in cells for i in c.replace("–", ",").split(","))
    assert shown == list(range(8)) and "shuffled with seed 1" in text
    again, *_ = split(settings, planner, 6, 4, 2, source=setup.FASHION, train_examples=8, seed=2)
    assert list(again.data[0].text[0]) != list(fig.data[0].text[0])  # another seed, another order


def test_show_split_refuses_more_fashion_examples_than_exist(settings, planner):
    fig, text, _ = split(settings, planner, 150, 64, 2, source=setup.FASHION, train_examples=70000)
    trained, _ = train.start_run(settings, threading.Lock(), "big", *form(train_examples=70000))
    assert fig is None and is_error(text) and is_error(trained)
    assert "train examples (70000) must be a whole number from 1 to 60000" in text and text == trained


@pytest.mark.parametrize(
    "over,message",
    [
        ({"batch": None}, "global batch size is empty"),
        ({"epochs": None}, "epochs is empty"),
        ({"lr": None}, "learning rate is empty"),
        ({"batch": 12.7}, "global batch size (12.7) must be a whole number"),
        ({"workers": 0}, "worker processes (0) must be a whole number from 1 to 8"),
    ],
)
def test_empty_or_odd_training_fields_are_named_plainly(settings, over, message):
    text, _ = train.start_run(settings, threading.Lock(), "odd", *form(**over))
    assert is_error(text) and message in text and "None" not in text


def test_empty_or_odd_split_and_loss_fields_are_named_plainly(settings, planner):
    assert "global batch size is empty" in loss.loss_check(settings, 2, [], None, 0)[0]
    assert "(0)" not in loss.loss_check(settings, 2, [], None, 0)[0]
    assert (
        "examples in the batch (10) must be a whole number from 1 to 6, or 0 for the whole global batch."
        in (loss.loss_check(settings, 2, [], 6, 0, examples=10)[0])
    )
    assert "global batch size is empty" in setup.batch_note(settings, None, 2, [])
    assert "must be a whole number from 1 to 65536" in setup.batch_note(settings, 1e20, 2, [])
    assert "(12.7) must be a whole number" in setup.batch_note(settings, 12.7, 2, [])
    assert "worker processes (0) must be" in split(settings, planner, 150, 64, 2, workers=0)[1]
    assert "global batch size (12.7)" in split(settings, planner, 150, 12.7, 2)[1]
    assert "worker processes is empty" in split(settings, planner, 150, 64, 2, workers=None)[1]


def test_gallery_captions_show_the_true_class_first_and_fit_a_thumbnail():
    names = data.CLASS_NAMES
    assert fmt.gallery_caption(7, 5) == f"✗ {names[5]} → {names[7]}"  # true Sandal, predicted Sneaker
    assert fmt.gallery_caption(9, 9) == f"✓ {names[9]}"
    assert max(len(fmt.gallery_caption(p, t)) for p in range(10) for t in range(10)) <= 26


def write_run(root, name, state, checkpoints=(), log="", events=()):
    run = root / name
    (run / "checkpoints").mkdir(parents=True, exist_ok=True)
    (run / "config.json").write_text(json.dumps({"global_batch": 64, "devices": ["cpu:0"]}))
    (run / "status.json").write_text(json.dumps({"state": state}))
    for c in checkpoints:
        (run / "checkpoints" / f"{c}.index").write_text("")
    (run / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (run / jobs.LOG_FILE).write_text(log)
    return run


def test_the_loss_plot_marks_the_checkpoints_on_disk_and_redraws_when_one_is_deleted(settings):
    events = [{"step": s, "loss": 1.0, "examples": 64} for s in (10, 20, 30)]
    events += [{"event": "checkpoint", "step": s} for s in (10, 20, 30)]
    run = write_run(
        settings.runs_root, "kept", "finished", checkpoints=["ckpt-10", "ckpt-20", "ckpt-30"], events=events
    )
    marked = lambda fig: [x for x in fig.data[1].x if x is not None][::2]  # noqa: E731  (two ends a line)
    *view, sig = watch.poll_run(settings, "kept", None)
    assert marked(view[1]) == [10, 20, 30]
    (run / "checkpoints" / "ckpt-20.index").unlink()  # deleted by hand: nothing to restore there
    *view, _ = watch.poll_run(settings, "kept", sig)
    assert marked(view[1]) == [10, 30]


def test_with_an_l2_weight_the_epoch_plot_says_which_loss_has_the_penalty(settings):
    # With --l2 0.01 the train loss (3.54, penalty included) and test loss (1.66, none) are
    # labelled as such, or side by side the gap would read as overfitting.
    epoch = {"epoch": 1, "step": 10, "train_loss": 3.54, "train_accuracy": 0.5, "test_loss": 1.66, "test_accuracy": 0.5}
    run = write_run(settings.runs_root, "l2", "finished", events=[epoch])
    names = lambda: {t.name for t in watch.run_view(settings, "l2")[2].data}  # noqa: E731
    assert {"train loss", "test loss"} <= names()
    (run / "config.json").write_text(json.dumps({"global_batch": 64, "devices": ["cpu:0"], "l2": 0.01}))
    assert {"train loss + L2 penalty", "test loss (no penalty)"} <= names()


def test_log_lines_keep_events_and_process_output_apart_in_their_own_order(settings):
    events = [
        {"event": "start", "step": 0, "message": "training", "time": 1e9},
        {"event": "stopped", "step": 40, "message": "stop requested", "time": 1e9 + 60},
    ]
    log = "\n$ distcore train --run-dir x\nstopped at step 40 of 2814; run directory: x\n"
    write_run(settings.runs_root, "logged", "stopped", events=events, log=log)
    lines = watch.run_view(settings, "logged")[3].splitlines()
    command = next(i for i, line in enumerate(lines) if line.startswith("$ distcore train"))
    stopped_event = next(i for i, line in enumerate(lines) if "] stopped at step 40" in line)
    assert lines[0] == "── events ──" and lines.index("── process output (train.log) ──") == 3
    assert stopped_event < 3 < command < lines.index("stopped at step 40 of 2814; run directory: x")
    # A run the CLI or a library trained has no train.log: not "(none yet)", which reads as output to come.
    (write_run(settings.runs_root, "by-cli", "finished", events=events) / jobs.LOG_FILE).unlink()
    assert (
        watch.run_view(settings, "by-cli")[3]
        .splitlines()[-1]
        .startswith("(none: the app keeps the output of the processes it starts; this run's came from the CLI")
    )
    # Started in the app, resumed from the CLI: the box does not end with the app's process's
    # last line, "stopped at step 40", as if that were the end.
    resumed = events + [{"event": "resume", "step": 40, "message": "resumed from ckpt-40", "time": 1e9 + 90}]
    run = write_run(settings.runs_root, "mixed", "stopped", events=resumed, log=log)
    (run / jobs.JOB_FILE).write_text(json.dumps({"pid": 1, "started": 1e9 - 5}))
    assert watch.run_view(settings, "mixed")[3].splitlines()[-1].startswith("(a later process, from the CLI")
    (run / jobs.JOB_FILE).write_text(json.dumps({"pid": 1, "started": 1e9 + 85}))  # the app's own resume
    assert watch.run_view(settings, "mixed")[3].splitlines()[-1] == "stopped at step 40 of 2814; run directory: x"


def test_evaluate_pickers_follow_run_states_and_new_checkpoints(settings):
    run = write_run(settings.runs_root, "qa", "running")
    _, _, run_update, ckpt_update, seen = watch.poll_lists(settings, None, None, None, None)
    assert run_update["value"] == "qa" and run_update["choices"] == [("qa (died)", "qa")]  # no process
    assert ckpt_update["choices"] == [] and ckpt_update["value"] is None
    assert watch.poll_lists(settings, None, "qa", None, seen)[2:] == (gr.skip(), gr.skip(), seen)
    write_run(settings.runs_root, "qa", "finished", checkpoints=["ckpt-20", "ckpt-40"])
    _, _, run_update, ckpt_update, seen = watch.poll_lists(settings, None, "qa", None, seen)
    assert run_update["choices"] == [("qa (finished)", "qa")] and run_update["value"] == "qa"
    assert ckpt_update["choices"] == ["ckpt-20", "ckpt-40"] and ckpt_update["value"] == "ckpt-40"
    # The page's own pick follows the newest checkpoint ...
    (run / "checkpoints" / "ckpt-60.index").write_text("")
    _, _, _, ckpt_update, seen = watch.poll_lists(settings, None, "qa", "ckpt-40", seen)
    assert ckpt_update["choices"][-1] == "ckpt-60" and ckpt_update["value"] == "ckpt-60"
    # ... a checkpoint the user picked stays picked.
    (run / "checkpoints" / "ckpt-80.index").write_text("")
    _, _, _, ckpt_update, _ = watch.poll_lists(settings, None, "qa", "ckpt-20", seen, ["qa", "ckpt-20"])
    assert ckpt_update["choices"][-1] == "ckpt-80" and ckpt_update["value"] == "ckpt-20"


def test_the_evaluate_run_picker_follows_a_new_run_until_the_user_picks_one(settings):
    write_run(settings.runs_root, "old", "finished", checkpoints=["ckpt-10"])
    _, _, run_update, _, seen = watch.poll_lists(settings, None, None, None, None)
    assert run_update["value"] == "old"
    newer = write_run(settings.runs_root, "new", "finished", checkpoints=["ckpt-5"])
    later = (settings.runs_root / "old" / "config.json").stat().st_mtime + 5
    os.utime(newer / "config.json", (later, later))
    _, _, run_update, ckpt_update, seen = watch.poll_lists(settings, None, "old", "ckpt-10", seen)
    assert (run_update["value"], ckpt_update["value"]) == ("new", "ckpt-5")  # the page's pick moved on
    _, _, run_update, ckpt_update, _ = watch.poll_lists(settings, None, "old", "ckpt-10", seen, ["old", None])
    assert (run_update["value"], ckpt_update["value"]) == ("old", "ckpt-10")  # the user's pick stays


def test_automatic_run_names_started_in_the_same_second_differ(tmp_path, monkeypatch):
    monkeypatch.setattr(runs.time, "strftime", lambda fmt: "run-20261123-210821")
    assert [runs.claim_new_name(tmp_path) for _ in range(3)] == [
        "run-20261123-210821",
        "run-20261123-210821-2",
        "run-20261123-210821-3",
    ]


def test_a_run_stopped_before_training_began_says_why_it_cannot_be_resumed(settings):
    lock = threading.Lock()
    run = settings.runs_root / "early"
    run.mkdir(parents=True)
    (run / "status.json").write_text(json.dumps({"state": "stopped", "message": "stopped before training began"}))
    message = (
        "run early was stopped before training began and saved nothing, so there is nothing to "
        "resume, evaluate or export: start it again under the same name."
    )
    assert message in train.resume_run(settings, lock, "early", *form(max_steps=None))[0]
    assert message in train.export_run(settings, "early")[1]


def test_one_tick_lists_the_runs_once_for_both_pickers(settings, monkeypatch):
    for name in ("a1", "b2", "c3"):
        write_run(settings.runs_root, name, "finished")
    read = []
    status = runs.read_status
    monkeypatch.setattr(runs, "read_status", lambda d: read.append(d) or status(d))
    train_update, labels, eval_update, _, seen = watch.poll_lists(settings, None, "b2", None, None)
    assert len(read) == 3  # one status.json read per run, not one per picker
    assert train_update["choices"] == eval_update["choices"] == [tuple(x) for x in labels]
    assert sorted(labels) == [["a1 (finished)", "a1"], ["b2 (finished)", "b2"], ["c3 (finished)", "c3"]]
    # Nothing changed on disk: both pickers are left alone.
    assert watch.poll_lists(settings, labels, "b2", None, seen) == (gr.skip(), labels, gr.skip(), gr.skip(), seen)
    write_run(settings.runs_root, "b2", "stopped")
    train_update, _, eval_update, _, _ = watch.poll_lists(settings, labels, "b2", None, seen)
    assert ("b2 (stopped)", "b2") in train_update["choices"] and ("b2 (stopped)", "b2") in eval_update["choices"]


def test_following_another_run_clears_the_exported_files(tmp_path):
    demo = shell.build_app(runs_root=tmp_path, devices_info=CPU_ONLY, planner=jobs.Planner())
    config = demo.get_config_file()
    ids = {c.get("props", {}).get("label"): c["id"] for c in config["components"]}
    run, files = ids["Run to follow"], ids["Files"]
    clears = [d for d in config["dependencies"] if (run, "change") in d["targets"] and files in d["outputs"]]
    assert len(clears) == 1
    fn = demo.fns[clears[0]["id"]].fn
    assert fn() == (None, "")


@pytest.mark.slow
def test_a_double_click_on_start_with_no_name_starts_one_run(tmp_path):
    settings = appsettings.make_settings(tmp_path / "runs", max_jobs=2, devices_info=CPU_ONLY)
    lock = threading.Lock()
    fields = form(max_steps=2, train_examples=640)
    first, dropdown, recent = train.start_click(settings, lock, None, "", *fields)
    again, skipped, recent2 = train.start_click(settings, lock, recent, "", *fields)
    try:
        assert "Started **run-" in first and "Already started" in again and skipped == gr.skip()
        assert recent2 == recent and [p.name for p in jobs.run_dirs(settings.runs_root)] == [dropdown["value"]]
    finally:
        for run in jobs.run_dirs(settings.runs_root):
            jobs.stop_training(run)
            jobs.wait_until_done(run, timeout=120)


def test_whole_number_fields_hand_decimals_over_to_be_refused(tmp_path):
    # precision=0 made Gradio round 12.7 to 13 before any handler saw it.
    demo = shell.build_app(runs_root=tmp_path, devices_info=CPU_ONLY, planner=jobs.Planner())
    numbers = {b.label: b for b in demo.blocks.values() if isinstance(b, gr.Number)}
    for label in ("Global batch size", "Epochs", "Worker processes", "Training examples", "N (toy dataset size)"):
        assert numbers[label].preprocess(12.7) == 12.7


# ---------------------------------------------------------------- runs that ended early, stops, hosting


def stopped_before_training(root, name, when=None):
    """A run launched from the app and stopped within a second: job.json and status, no config.json."""
    run = root / name
    run.mkdir(parents=True)
    (run / jobs.JOB_FILE).write_text(json.dumps({"pid": 999999999, "started": 1.0, "resume": False}))
    (run / "status.json").write_text(json.dumps({"state": "stopped", "message": "stopped before training began"}))
    if when is not None:
        os.utime(run / jobs.JOB_FILE, (when, when))
    return run


def test_a_run_stopped_before_it_began_is_not_pinned_first_and_says_it_never_has_a_checkpoint(settings):
    early = stopped_before_training(settings.runs_root, "edge18", when=time.time() - 60)
    later = write_run(settings.runs_root, "later", "finished", checkpoints=["ckpt-5"])
    (later / jobs.JOB_FILE).write_text("{}")
    assert follow.run_names(settings.runs_root) == ["later", "edge18"]  # newest launch first
    assert follow.default_run(settings.runs_root) == "later"
    _, _, run_update, ckpt_update, _ = watch.poll_lists(settings, None, None, None, None)
    assert (run_update["value"], ckpt_update["value"]) == ("later", "ckpt-5")
    assert watch.on_load(settings)[0]["value"] == "later"
    # Launched after the last real run, it is listed first, but a fresh page follows a run that trained.
    os.utime(early / jobs.JOB_FILE)
    os.utime(later / jobs.JOB_FILE, (time.time() - 120,) * 2)
    os.utime(later / "config.json", (time.time() - 120,) * 2)
    assert follow.run_names(settings.runs_root) == ["edge18", "later"]
    assert follow.default_run(settings.runs_root) == "later"
    md = evaluate_tab.evaluate(settings, "edge18", None, evaluate_tab.NO_STRATEGY, 2, [])[0]
    assert is_error(md) and "no checkpoints yet" not in md
    assert (
        "run edge18 was stopped before training began and saved nothing, so it has no checkpoint and never will"
    ) in md


def test_a_run_killed_before_it_saved_its_settings_says_so_everywhere(settings):
    # Its status line promises no Resume "from step 0", and Resume, the settings button and
    # Evaluate say it ended before it saved its settings, not "/server/path has no readable
    # config.json: is it a distcore run directory?" or "no checkpoints yet".
    run = stopped_before_training(settings.runs_root, "early")
    (run / "status.json").write_text(json.dumps({"state": "starting", "pid": 999999999}))  # then SIGKILL
    said = "run early died (its process is gone) before training began and saved nothing"
    status = watch.run_view(settings, "early")[0]
    assert "(killed, or a crash)" in status and "start it again under the same name" in status
    assert "Resume" not in status
    for text in (
        train.resume_run(settings, threading.Lock(), "early", *form())[0],
        train.load_run_settings(settings, "early")[0],
        evaluate_tab.evaluate(settings, "early", None, evaluate_tab.NO_STRATEGY, 2, [])[0],
    ):
        assert is_error(text) and said in text and str(settings.runs_root) not in text, text


def saved_run(root, name, step, **config):
    """A run directory as training leaves it (config.json, a checkpoint at `step`), no TensorFlow."""
    from distcore.config import TrainConfig

    run = root / name
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.json").write_text(json.dumps(TrainConfig(**config).to_dict()))
    (run / "status.json").write_text(json.dumps({"state": "stopped", "step": step}))
    (run / "checkpoints" / f"ckpt-{step}.index").write_text("")
    return run


@pytest.fixture
def launches(monkeypatch):
    """What resume_run would launch: (name, args, workers) of each start_training call; the engine and
    Ray address of each in `launches.engines`."""

    class Calls(list):
        engines: list

    calls = Calls()
    calls.engines = []

    def start_training(root, name, args, resume=False, workers=1, engine="local", ray_address=""):
        calls.append((name, args, workers))
        calls.engines.append((engine, ray_address))
        return 4242

    monkeypatch.setattr(jobs, "start_training", start_training)
    return calls


def with_ray(settings, installed=True, address=""):
    """The app's settings where Ray is (or is not) installed, its runs joining `address`."""
    import dataclasses

    return dataclasses.replace(settings, offer=dataclasses.replace(settings.offer, ray=installed, ray_address=address))


def test_two_worker_processes_start_on_the_engine_the_form_chose(settings, launches):
    lock = threading.Lock()
    ray = with_ray(settings, address="10.0.0.1:6379")
    text, _ = train.start_run(ray, lock, "on-ray", *form(workers=2), engine="ray")
    assert "Started **on-ray** (process 4242) on 2 worker processes on Ray; 20 steps" in text
    assert launches[-1][2] == 2 and launches.engines[-1] == ("ray", "10.0.0.1:6379")
    train.start_run(ray, lock, "local", *form(workers=2), engine="local")
    train.start_run(ray, lock, "one", *form(workers=1), engine="ray")  # one process: no engine to choose
    train.start_run(ray, lock, "default", *form(workers=2))
    assert [e for e, _ in launches.engines[1:]] == ["local", "local", "local"]
    # Where Ray is not installed the app does not offer it, and a client that asks for it is told why.
    text, dropdown = train.start_run(with_ray(settings, installed=False), lock, "x", *form(workers=2), engine="ray")
    assert is_error(text) and "pip install" in text and dropdown == gr.skip() and len(launches) == 4
    text, _ = train.start_run(ray, lock, "x", *form(workers=2), engine="spark")
    assert is_error(text) and "engine 'spark' is not offered here: it must be one of: local, ray" in text
    # The fold's one line says where the workers run.
    label = train.settings_summary(ray, *form(workers=2), engine="ray")["label"]
    assert "batch 64 on 2 worker processes on Ray · AUTO" in label
    assert "on 2 worker processes · AUTO" in train.settings_summary(ray, *form(workers=2))["label"]


def test_a_ray_run_resumes_on_the_forms_engine_and_trains_more_on_its_own(settings, launches):
    lock = threading.Lock()
    ray = with_ray(settings)
    run = saved_run(
        settings.runs_root,
        "pair",
        20,
        devices=("cpu:0",),
        workers=2,
        train_examples=6000,
        test_examples=500,
        steps_per_loop=5,
    )
    text, _ = train.resume_run(
        ray, lock, "pair", *form(workers=2, train_examples=6000, epochs=2, max_steps=0), engine="ray"
    )
    assert "Resuming **pair** from ckpt-20, with epochs 1 → 2 on Ray" in text and launches.engines[-1] == ("ray", "")
    train.resume_run(ray, lock, "pair", *form(workers=2, train_examples=6000, epochs=2, max_steps=0), engine="local")
    assert launches.engines[-1] == ("local", "")
    # Train 1 more epoch: the engine of the app's last launch of the run, while Ray is installed.
    (run / "status.json").write_text(json.dumps({"state": "finished", "step": 20}))
    (run / jobs.JOB_FILE).write_text(json.dumps({"pid": 1, "started": 0, "resume": False, "engine": "ray"}))
    trainapi.train_more(ray, lock, [], "pair")
    assert launches.engines[-1] == ("ray", "") and launches[-1][2] == 2
    trainapi.train_more(with_ray(settings, installed=False), lock, [], "pair")
    assert launches.engines[-1] == ("local", "")


def test_the_engine_choice_shows_with_two_or_more_worker_processes_where_ray_is_installed(settings):
    ray = with_ray(settings)
    assert setup.engine_shown(ray, 2)["visible"] is True
    assert setup.engine_shown(ray, 1)["visible"] is False
    assert setup.engine_shown(ray, "2.5")["visible"] is False  # a value the form refuses
    assert setup.engine_shown(with_ray(settings, installed=False), 2)["visible"] is False
    assert "engine" in setup.KEPT_FIELDS  # a browser keeps it with the form


def test_resume_takes_the_setup_forms_resumable_fields_and_refuses_the_others(settings, launches):
    saved_run(
        settings.runs_root,
        "ra",
        94,
        devices=("cpu:0", "cpu:1"),
        train_examples=6000,
        test_examples=500,
        steps_per_loop=5,
    )
    lock = threading.Lock()
    text, _ = train.resume_run(
        settings, lock, "ra", *form(count=3, batch=128, model="mlp", epochs=3, train_examples=6000, max_steps=0)
    )
    assert is_error(text) and launches == []
    assert (
        (
            "The training form differs from run ra in model (the run: cnn, the form: mlp), global batch size "
            "(the run: 64, the form: 128)"
        )
        in text
        and "set these back in the form (the button 'Use the followed run's settings'" in text
        and "start a new run" in text
    )
    text, _ = train.resume_run(
        settings,
        lock,
        "ra",
        *form(count=3, epochs=3, train_examples=6000, max_steps=0, steps_per_loop=10, ckpt_every=30, ckpt_keep=4),
    )
    assert "Resuming **ra** from ckpt-94, with epochs 1 → 3, steps per loop 5 → 10" in text
    assert "checkpoints kept 0 (all) → 4" in text
    assert "devices cpu:0,cpu:1 → cpu:0,cpu:1,cpu:2" in text and "282 steps in all" in text
    assert launches[-1] == (
        "ra",
        [
            "--devices",
            "cpu:0,cpu:1,cpu:2",
            "--epochs",
            "3",
            "--max-steps",
            "0",
            "--steps-per-loop",
            "10",
            "--checkpoint-every",
            "30",
            "--keep-checkpoints",
            "4",
        ],
        1,
    )
    # Onto 2 worker processes (cluster --resume): one CPU replica each, so no devices are passed.
    train.resume_run(settings, lock, "ra", *form(epochs=3, train_examples=6000, max_steps=0, workers=2))
    assert launches[-1] == (
        "ra",
        [
            "--epochs",
            "3",
            "--max-steps",
            "0",
            "--steps-per-loop",
            "5",
            "--checkpoint-every",
            "0",
            "--keep-checkpoints",
            "0",
        ],
        2,
    )


def test_resume_lifts_a_max_steps_limit_and_names_the_limit_that_binds(settings, launches):
    saved_run(
        settings.runs_root,
        "long",
        400,
        devices=("cpu:0", "cpu:1"),
        train_examples=20000,
        epochs=2,
        max_steps=400,
        test_examples=500,
        steps_per_loop=5,
    )
    lock = threading.Lock()
    text, _ = train.resume_run(settings, lock, "long", *form(train_examples=20000, epochs=2, max_steps=400))
    assert is_error(text) and launches == []
    assert (
        "run long already finished at step 400 of 400: its max steps (400) end there; raise max steps, "
        "or set them to 0 (no limit), to train more."
    ) in text
    for no_limit in (0, None):  # the form's "no limit": 0 or empty
        text, _ = train.resume_run(settings, lock, "long", *form(train_examples=20000, epochs=2, max_steps=no_limit))
        assert "Resuming **long** from ckpt-400, with max steps 400 → no limit; 626 steps in all" in text
        assert launches[-1][1][-8:-2] == ["--max-steps", "0", "--steps-per-loop", "5", "--checkpoint-every", "0"]
    # Epochs bind (3 x 94 = 282 steps), not the raised max steps: the message says epochs.
    saved_run(
        settings.runs_root,
        "ra",
        282,
        devices=("cpu:0", "cpu:1"),
        train_examples=6000,
        epochs=3,
        test_examples=500,
        steps_per_loop=5,
    )
    text, _ = train.resume_run(settings, lock, "ra", *form(train_examples=6000, epochs=3, max_steps=500))
    assert "run ra already finished at step 282 of 282: its 3 epochs end there; raise epochs to train more." in text


def test_resume_of_a_stopped_cluster_still_exiting_says_to_wait(settings, launches):
    run = saved_run(
        settings.runs_root,
        "pair",
        12,
        devices=("cpu:0",),
        workers=2,
        train_examples=6000,
        test_examples=500,
        steps_per_loop=5,
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "-m", "distcore", "cluster", "--run-dir", str(run)]
    )
    try:
        assert wait_for(lambda: "cluster" in jobs.pid_cmdline(proc.pid), timeout=10)
        (run / jobs.JOB_FILE).write_text(json.dumps({"pid": proc.pid}))
        # Told before the job limit (1 here), which counts the exiting process as a job.
        text, _ = train.resume_run(settings, threading.Lock(), "pair", *form(workers=2, train_examples=6000, epochs=2))
        assert is_error(text) and "has stopped, but its process" in text and "try again in a few seconds" in text
        # A process launched after that status was written is a resume starting, not one exiting
        # (a second click on Resume is not told to try again).
        (run / jobs.JOB_FILE).write_text(json.dumps({"pid": proc.pid, "started": time.time()}))
        text, _ = train.resume_run(settings, threading.Lock(), "pair", *form(workers=2, train_examples=6000, epochs=2))
        assert is_error(text) and "run 'pair' is already training" in text
        assert launches == []
    finally:
        proc.kill()
        proc.wait()


def test_a_stop_before_a_resumed_run_trains_keeps_its_checkpoint(settings):
    run = saved_run(settings.runs_root, "back", 140, devices=("cpu:0",), train_examples=6000, test_examples=500)
    # A stand-in for `train --resume` still setting up: its status says "starting", as the trainer's does.
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time; time.sleep(60)",
            "-m",
            "distcore",
            "train",
            "--run-dir",
            str(run),
            "--resume",
        ]
    )
    try:
        assert wait_for(lambda: "train" in jobs.pid_cmdline(proc.pid), timeout=10)
        (run / jobs.JOB_FILE).write_text(json.dumps({"pid": proc.pid, "resume": True}))
        (run / "status.json").write_text(json.dumps({"state": "starting", "pid": proc.pid, "step": 140}))
        assert train.stop_run(settings, "back") == (
            "Stopping **back**: it has not resumed training yet, so it exits "
            "at step 140, where it resumed from; its checkpoint ckpt-140 stays."
        )
        assert proc.wait(timeout=10) != 0  # it was signalled
    finally:
        proc.kill()
        proc.wait()


def test_a_dead_run_is_labelled_died_as_its_status_line_says(settings):
    run = write_run(settings.runs_root, "crash", "running", checkpoints=["ckpt-40"])
    (run / jobs.JOB_FILE).write_text(json.dumps({"pid": 999999999}))  # gone
    assert follow.run_labels(settings.runs_root) == [("crash (died)", "crash")]
    status = watch.run_view(settings, "crash")[0]
    assert "**crash** · **died**" in status and "**Resume** continues from the newest checkpoint (ckpt-40)." in status


def test_wording_stop_point_replica_counts_and_worker_notes(settings):
    assert explain.stop_point({"steps_per_loop": 20, "workers": 2}) == (
        "it stops once its workers agree, at the end of this loop or at most one loop later (steps per loop: "
        "20 steps; a process's first loop is its first step), saves a checkpoint and exits."
    )
    assert "Per-replica batch: **64** (64 / 1 replica)" in setup.batch_note(settings, 64, 1, [])
    # The explanation after the arithmetic, not spliced into it.
    assert "(1 / 2 replicas = 0.5: one CPU replica per worker process)" in setup.batch_note(settings, 1, 2, [], 2)
    assert plots.count(1, "replica") == "1 replica" and plots.count(3, "replica") == "3 replicas"
    assert "64 examples cut 64 over 1 replica:" in loss.loss_check(settings, 1, [], 64, 0)[0]
    # What left the page for docs/app.md says it as the page did: a worker plan's wait, and where a stop lands.
    app_docs = " ".join((REPO / "docs" / "app.md").read_text().split())
    assert "takes 10-20 s, as every worker starts TensorFlow" in app_docs
    assert "finishes the current step" not in app_docs and "stops at the end of the current loop" in app_docs


def test_a_runs_settings_fill_in_the_form_and_resume_with_them(settings, launches):
    saved_run(
        settings.runs_root,
        "src",
        94,
        devices=("cpu:0", "cpu:1", "cpu:2"),
        global_batch=96,
        model="mlp",
        optimizer="sgd",
        learning_rate=0.05,
        seed=7,
        train_examples=6000,
        test_examples=500,
        steps_per_loop=5,
        checkpoint_every=30,
        policy="data",
        drop_remainder=True,
        l2=0.001,
        keep_checkpoints=3,
    )
    message, *values = train.load_run_settings(settings, "src")
    assert values[:18] == [
        3,
        gr.skip(),
        96,
        "data",
        "dataset",
        "mlp",
        "sgd",
        0.05,
        1,
        0,
        5,
        30,
        7,
        6000,
        500,
        True,
        1,
        3,
    ]
    assert values[18:] == ["classifier", "fashion-mnist", None]  # task, data, upload
    assert "now holds run **src**'s settings" in message and "L2 weight (0.001)" in message
    values[8] = 2  # Epochs raised there: Resume takes the form as it now is
    text, _ = train.resume_run(settings, threading.Lock(), "src", *values)
    assert "Resuming **src** from ckpt-94, with epochs 1 → 2" in text and launches[-1][0] == "src"
    # Devices this app does not offer are left as they are, and the message says so.
    saved_run(settings.runs_root, "gpus", 10, devices=("gpu:0", "gpu:1"))
    message, count, boxes, *_ = train.load_run_settings(settings, "gpus")
    assert (count, boxes) == (gr.skip(), gr.skip()) and "devices (gpu:0,gpu:1) are not offered here" in message
    on_gpus = appsettings.make_settings(
        settings.runs_root, max_jobs=1, devices_info={**CPU_ONLY, "gpus": ["gpu:0", "gpu:1"]}
    )
    assert list(train.load_run_settings(on_gpus, "gpus")[1:3]) == [gr.skip(), ["gpu:0", "gpu:1"]]
    # A run with no config.json yet, and no run at all: a message, and the form stays.
    stopped_before_training(settings.runs_root, "early")
    for name in ("early", None):
        message, *values = train.load_run_settings(settings, name)
        assert is_error(message) and values == [gr.skip()] * len(forms.TRAIN_FORM)


def test_a_page_keeps_following_its_own_run_and_evaluate_follows_it_too(settings):
    write_run(settings.runs_root, "mine", "finished", checkpoints=["ckpt-10"])
    theirs = write_run(settings.runs_root, "theirs", "finished", checkpoints=["ckpt-5"])
    later = (settings.runs_root / "mine" / "config.json").stat().st_mtime + 5
    os.utime(theirs / "config.json", (later, later))
    assert watch.on_load(settings)[0]["value"] == "theirs"  # a fresh page: the newest
    assert watch.on_load(settings, "mine")[0]["value"] == "mine"  # this browser's run
    assert watch.on_load(settings, "../gone")[0]["value"] == "theirs"  # not a run here: a fresh page's
    _, _, run_update, ckpt_update, _ = watch.poll_lists(settings, None, None, None, None, None, "mine")
    assert (run_update["value"], ckpt_update["value"]) == ("mine", "ckpt-10")


def test_a_polling_page_keeps_no_more_components_than_the_app_has(tmp_path, planner):
    # Gradio 6.31 files a session's rebuilt copy of a component under a new id each time an
    # event takes it as input after an update (a gr.skip() too): every tick of an open page
    # kept three more pickers, 25 KB a poll, never given back.
    import socket

    from gradio_client import Client

    write_run(tmp_path / "runs", "r1", "finished", checkpoints=["ckpt-10"])
    demo = shell.build_app(tmp_path / "runs", max_jobs=1, devices_info=CPU_ONLY, planner=planner)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    demo.queue().launch(server_port=port, prevent_thread_lock=True, quiet=True)
    try:
        c = Client(f"http://127.0.0.1:{port}/", verbose=False)
        for _ in range(10):
            c.predict(None, None, None, api_name="/poll_lists")
            c.predict("r1", api_name="/poll_run")
        sessions = list(demo.state_holder.session_data.values())
        assert [len(s.blocks_config.blocks) for s in sessions] == [len(demo.blocks)]
    finally:
        demo.close()


def test_a_run_folder_under_a_name_the_app_does_not_take_is_named_not_passed_over(settings):
    # A run copied as "my run (copy)" is never listed, and the page says why.
    saved_run(settings.runs_root, "kept", 10, devices=("cpu:0",))
    saved_run(settings.runs_root, "my run (copy)", 10, devices=("cpu:0",))
    (settings.runs_root / "not a run").mkdir()  # no config.json: not a run, not named
    assert watch.on_load(settings)[0]["info"] == watch.run_dropdown(settings)["info"]  # (a page opened)
    update = watch.run_dropdown(settings)
    assert [name for _, name in update["choices"]] == ["kept"]
    assert update["info"] == (
        "Not listed: 'my run (copy)' in the runs folder. Run names take 1-100 ASCII letters, "
        "digits, '_', '.' or '-', starting with a letter or digit: rename the folder, then "
        "↻ Refresh runs."
    )
    (settings.runs_root / "my run (copy)").rename(settings.runs_root / "my-run-copy")
    update = watch.run_dropdown(settings)
    assert sorted(name for _, name in update["choices"]) == ["kept", "my-run-copy"] and update["info"] == ""


def test_gradios_files_go_to_a_folder_of_this_users_own_when_the_shared_one_is_anothers(tmp_path, monkeypatch):
    # /tmp/gradio made by another user's app (0755): Evaluate and Export still work, not "Error".
    import tempfile

    monkeypatch.delenv("GRADIO_TEMP_DIR", raising=False)
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    assert hosting.gradio_temp_dir() is None  # no shared folder yet: Gradio's default
    (tmp_path / "gradio").mkdir()
    assert hosting.gradio_temp_dir() is None  # writable
    theirs = str(tmp_path / "gradio")
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: False if str(path) == theirs else real_access(path, mode))
    assert hosting.gradio_temp_dir() == str(tmp_path / f"gradio-{os.getuid()}")
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path / "mine"))
    assert hosting.gradio_temp_dir() is None  # a folder asked for is kept


def test_no_writable_temporary_folder_is_one_plain_error(monkeypatch):
    # A read-only root filesystem: Gradio's import still works, no traceback.
    import tempfile

    def none_usable():
        raise FileNotFoundError("No usable temporary directory found in ['/tmp', '/var/tmp']")

    monkeypatch.delenv("GRADIO_TEMP_DIR", raising=False)
    monkeypatch.setattr(tempfile, "gettempdir", none_usable)
    with pytest.raises(
        DistcoreError,
        match=r"found in \['/tmp', '/var/tmp'\]\. Gradio keeps its files in a "
        r"temporary folder: set TMPDIR",
    ):
        hosting.gradio_temp_dir()


def test_stopping_a_run_this_page_did_not_start_takes_a_second_click(settings, monkeypatch):
    # A fresh page follows the newest running run, another user's: one click does not stop it.
    stopped = []
    training = {"theirs": 101, "mine": 202}  # run -> the process training it now
    monkeypatch.setattr(jobs, "active_runs", lambda root: ["theirs", "mine"])
    monkeypatch.setattr(jobs, "job_pid", lambda run_dir: training.get(run_dir.name))
    monkeypatch.setattr(train, "stop_run", lambda settings, name: stopped.append(name) or f"Stopping **{name}**")
    text, armed = train.stop_click(settings, [], None, "theirs")
    assert "**theirs** was not started from this page" in text and "again within 10 s" in text and stopped == []
    assert train.stop_click(settings, [], armed, "theirs") == ("Stopping **theirs**", None) and stopped == ["theirs"]
    # The page that started "mine" as process 150 claims that process, not the run's name alone:
    # another user's resume of it (process 202), or a CLI's, takes two clicks.
    assert "not started from this page" in train.stop_click(settings, [["mine", 150]], None, "mine")[0]
    assert train.stop_click(settings, [["mine", 150], ["mine", 202]], None, "mine")[0] == "Stopping **mine**"
    stopped.remove("mine")
    armed["time"] -= 11
    assert "not started from this page" in train.stop_click(settings, [], armed, "theirs")[0]  # too late
    assert "not started from this page" in train.stop_click(settings, [], {**armed, "name": "mine"}, "theirs")[0]
    assert train.stop_click(settings, [], None, "gone")[0] == "Stopping **gone**"  # not running: stop_run says so
    assert stopped == ["theirs", "gone"]


@pytest.mark.slow
def test_a_start_or_resume_notes_the_run_as_this_pages(settings):
    def started(*args):
        return "Started **r**", {"__type__": "update", "value": "r"}

    def refused(*args):
        return "<div class='dc-error'>no</div>", gr.skip()

    (settings.runs_root / "r").mkdir()
    (settings.runs_root / "r" / jobs.JOB_FILE).write_text('{"pid": 4321}')  # as the launch writes it
    assert train.claiming(settings, started)([["a", 1]], "x")[-1] == [["a", 1], ["r", 4321]]
    assert train.claiming(settings, refused)([["a", 1]], "x") == (
        "<div class='dc-error'>no</div>",
        gr.skip(),
        [["a", 1]],
    )


def test_evaluate_names_a_checkpoint_pruned_since_it_was_picked(settings):
    # With Checkpoints kept, a checkpoint picked a moment before may be deleted by the training
    # run: Evaluate says so, not "choose one of run 'own2''s checkpoints."
    run = saved_run(settings.runs_root, "own2", 2200, devices=("cpu:0",), keep_checkpoints=2)
    (run / "checkpoints" / "ckpt-2000.index").write_text("")
    md = evaluate_tab.evaluate(settings, "own2", "ckpt-1800", evaluate_tab.NO_STRATEGY, 2, [])[0]
    assert (
        is_error(md)
        and (
            "run own2 has no checkpoint ckpt-1800; it has: ckpt-2000, ckpt-2200. It keeps its "
            "newest 2 (checkpoints kept: --keep-checkpoints) and deletes older ones"
        )
        in md
    )
    for step in range(1, 8):
        (run / "checkpoints" / f"ckpt-{step}.index").write_text("")
    assert (
        "it has: ckpt-5, ckpt-6, ckpt-7, ckpt-2000, ckpt-2200 (and 4 older)."
        in evaluate_tab.evaluate(settings, "own2", "ckpt-9", evaluate_tab.NO_STRATEGY, 2, [])[0]
    )


@pytest.mark.slow
def test_evaluate_takes_the_newest_when_a_run_still_training_deleted_the_one_picked(settings, monkeypatch):
    # With Checkpoints kept 1-3, the picker's checkpoint (it follows the newest) can be deleted by
    # the training run before the evaluation has loaded: it reads the newer one, not "has no checkpoint".
    run_dir = settings.runs_root / "live"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "distcore",
            "train",
            "--run-dir",
            str(run_dir),
            "--replicas",
            "2",
            "--train-examples",
            "640",
            "--test-examples",
            "200",
            "--steps-per-loop",
            "5",
            "--checkpoint-every",
            "5",
            "--keep-checkpoints",
            "1",
        ],
        cwd=REPO,
        check=True,
        timeout=300,
        capture_output=True,
    )
    assert runs.list_checkpoints(run_dir) == ["ckpt-10"]
    md = evaluate_tab.evaluate(settings, "live", "ckpt-5", evaluate_tab.NO_STRATEGY, 2, [])[0]
    assert is_error(md) and "has no checkpoint ckpt-5" in md  # a run that has ended: the one asked for, or nothing
    monkeypatch.setattr(jobs, "is_active", lambda run: run == run_dir)  # as if it trained on
    md = evaluate_tab.evaluate(settings, "live", "ckpt-5", evaluate_tab.NO_STRATEGY, 2, [])[0]
    assert md.startswith("### Accuracy ") and "ckpt-10 (step 10) of **live**" in md, md
    assert (
        "Note: ckpt-5 was deleted by the run, which is still training and keeps only its newest checkpoints; "
        "this is the newest, ckpt-10."
    ) in md
    path, text = evaluate_tab.export_model(settings, "live", "ckpt-5")  # Export reads it as Evaluate does
    assert path.endswith("live-ckpt-10.keras") and "ckpt-5 was deleted by the run" in text, text


@pytest.mark.parametrize("fixed", [False, True], ids=["glibc's default", "the app's"])
def test_the_app_keeps_large_blocks_off_the_heap(fixed):
    # The app does not grow by about 9 MB a visit: glibc raises its mmap threshold as large blocks
    # are freed, and later ones stay in the worker threads' heaps (hosting.keep_large_blocks_off_the_heap).
    script = "\n".join(
        [
            "import ctypes, sys, numpy as np",
            "sys.path.insert(0, '.')",
            "from webapp import hosting; hosting.keep_large_blocks_off_the_heap()" if fixed else "",
            "libc = ctypes.CDLL('libc.so.6')",
            "class Info(ctypes.Structure):",
            "    _fields_ = [(n, ctypes.c_size_t) for n in ('arena', 'ordblks', 'smblks', 'hblks', 'hblkhd', 'usmblks',"
            "                                              'fsmblks', 'uordblks', 'fordblks', 'keepcost')]",
            "libc.mallinfo2.restype = Info",
            "big = np.ones(4 << 20, np.uint8); del big",  # freed: glibc's own threshold rises to 4 MiB
            "before = libc.mallinfo2().hblkhd; block = np.ones(1 << 20, np.uint8)",
            "print(libc.mallinfo2().hblkhd - before)",
        ]
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    if "undefined symbol: mallinfo2" in result.stderr or "cannot open shared object" in result.stderr:
        pytest.skip("needs glibc 2.33 or later")
    mapped = int(result.stdout.split()[-1])
    assert (mapped >= 1 << 20) == fixed, (mapped, result.stderr[-2000:])


def test_the_apps_sigterm_waits_on_for_runs_still_in_their_loop(tmp_path, monkeypatch, capsys):
    # A run in a loop longer than the 8 s wait is named as still going, and the app (PID 1 of its
    # container) waits for it, rather than leave and let the container end it with no checkpoint.
    waited = []
    monkeypatch.setattr(jobs, "stop_own_runs", lambda root: (["quick"], ["slow"]))
    monkeypatch.setattr(jobs, "wait_until_done", lambda run_dir, timeout: waited.append(run_dir.name) or True)
    with pytest.raises(SystemExit) as leaving:
        hosting.leave_stopping_own_runs(tmp_path)
    assert leaving.value.code == 143 and waited == ["slow"]
    said = capsys.readouterr().err
    assert "leaving" not in said.split("waiting for them")[0], said  # it waits first
    assert "stopped quick; still finishing their loop of steps: slow; waiting for them" in said
    assert said.rstrip().endswith("they stopped; leaving."), said


def test_the_quick_demo_sets_every_field_its_length_depends_on():
    # A step limit or a checkpoint interval left in the form from an earlier run would cut the demo
    # short or slow it; tab 1's replicas and batch stay the user's.
    fields = {forms_field for key, forms_field in forms.TRAIN_FORM if key in train.QUICK_DEMO}
    assert fields >= {"epochs", "max_steps", "steps_per_loop", "checkpoint_every", "train_examples", "test_examples"}
    assert train.QUICK_DEMO["max_steps"] == train.QUICK_DEMO["ckpt_every"] == 0


def test_compare_follows_the_newest_runs_until_the_picker_is_touched(settings):
    from webapp import compare as compare_page

    step = [{"event": "start", "step": 0, "time": 1.0}, {"step": 1, "loss": 1.0, "examples": 64, "time": 2.0}]
    write_run(settings.runs_root, "a", "finished", events=step)
    first = compare_page.poll(settings, [], "step", 0.6, False, None, None)
    assert first[0]["value"] == ["a"]
    time.sleep(0.01)
    write_run(settings.runs_root, "b", "running", events=step)  # a new run logs a step
    second = compare_page.poll(settings, ["a"], "step", 0.6, False, None, first[-1])
    assert second[0]["value"] == ["b", "a"]  # newest first, as the page's default
    picked = compare_page.poll(settings, ["a"], "step", 0.6, False, True, second[-1])  # the user's pick stays
    assert "value" not in picked[0]
