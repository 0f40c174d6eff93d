"""Run directories: names from the browser never reach the filesystem outside the runs root."""

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from conftest import ROOT
from distcore import jobs, runs
from distcore.config import DistcoreError


@pytest.mark.parametrize("name", ["..", "../x", "/etc", "a/b", "", " ", "x/../../etc", ".hidden", "a" * 101])
def test_unsafe_names_are_refused(tmp_path, name):
    with pytest.raises(DistcoreError, match="not allowed"):
        runs.safe_run_dir(tmp_path, name)


def test_a_symlink_out_of_the_root_is_refused(tmp_path):
    root, outside = tmp_path / "runs", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "sneaky").symlink_to(outside)
    with pytest.raises(DistcoreError, match="not a directory inside the runs folder"):
        runs.safe_run_dir(root, "sneaky")
    (outside / "config.json").write_text("{}")
    assert jobs.run_dirs(root) == [] and jobs.unlisted_runs(root) == []  # the app lists no run through it


@given(st.text(max_size=30))
def test_any_accepted_name_stays_inside_the_root(tmp_path_factory, name):
    root = tmp_path_factory.getbasetemp() / "root"
    try:
        path = runs.safe_run_dir(root, name)
    except DistcoreError:
        return
    assert path.parent == root.resolve() and "/" not in path.name and ".." not in path.name


def test_checkpoint_names_must_be_ckpt_step():
    assert runs.checkpoint_step("ckpt-500") == 500
    for bad in ("ckpt-x", "../ckpt-1", "ckpt", "model-5"):
        with pytest.raises(DistcoreError):
            runs.checkpoint_step(bad)


def test_a_torn_last_line_is_skipped_and_truncation_repairs_it(tmp_path):
    lines = [{"step": s, "loss": 1.0} for s in (1, 2, 3)] + [{"event": "checkpoint", "step": 2}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines) + '{"step": 4, "lo')
    assert [r.get("step") for r in runs.read_metrics(tmp_path)] == [1, 2, 3, 2]
    assert runs.truncate_metrics(tmp_path, 2) == 1  # step 3 rolled back, the torn line dropped
    text = (tmp_path / "metrics.jsonl").read_text()
    assert text.endswith("\n") and [json.loads(line)["step"] for line in text.splitlines()] == [1, 2, 2]


def test_damaged_or_hand_edited_run_files_read_as_damaged_not_as_errors(tmp_path):
    # None of these fails the app's view, the export, a plot or a resume (UnicodeDecodeError and
    # the like): bytes that are not UTF-8 in metrics.jsonl, a step of "x", a status of
    # {"state": 5, "step": "abc"}, config.json's "devices": 5.
    good = [{"step": 1, "epoch": 1, "loss": 2.0, "examples": 64}, {"event": "checkpoint", "step": 1}]
    bad = [
        {"step": "x", "loss": 1.0},
        {"step": 2, "loss": "1.0"},
        {"step": True, "loss": 1.0},
        ["not", "a record"],
        {"event": 5, "step": 2},
    ]
    (tmp_path / "metrics.jsonl").write_bytes(
        b"".join(json.dumps(r).encode() + b"\n" for r in good + bad)
        + b"\xff\xfe\x00garbage\n"
        + b'{"step": 3, "loss": 1.5, "message": "\xff"}\n'
    )
    assert runs.read_metrics(tmp_path) == good + [{"step": 3, "loss": 1.5, "message": "\ufffd"}]
    assert runs.truncate_metrics(tmp_path, 1) == 1
    assert runs.read_metrics(tmp_path) == good
    (tmp_path / "status.json").write_text(json.dumps({"state": 5, "step": "abc", "pid": 7, "total_steps": None}))
    assert runs.read_status(tmp_path) == {"pid": 7, "total_steps": None}
    assert jobs.job_progress(tmp_path).state == "unknown"
    assert runs.shown_config(tmp_path) == ({}, None)  # none yet
    (tmp_path / "config.json").write_text(json.dumps({"devices": 5}))
    shown, damaged = runs.shown_config(tmp_path)
    assert shown == {} and damaged.startswith(f"{tmp_path / 'config.json'} is incomplete or damaged: ")


def test_a_run_that_ended_before_saving_its_settings_is_called_so(tmp_path):
    # A launch that failed on a full disk leaves the lock (or the app's job.json and log) and no
    # status: Resume says the run ended before saving its settings, not "is it a distcore run directory?".
    (tmp_path / "a8").mkdir()
    (tmp_path / "a8" / ".lock").write_text("")
    with pytest.raises(
        DistcoreError,
        match=r"^run a8 ended before it saved its settings \(config.json; its log says "
        r"why\), so there is nothing to resume, evaluate or export: start it "
        r"again under the same name\.$",
    ):
        runs.resume_config(tmp_path / "a8")
    (tmp_path / "other").mkdir()
    with pytest.raises(DistcoreError, match="is it a distcore run directory"):
        runs.read_config(tmp_path / "other")


def test_a_resume_whose_checkpoints_folder_is_a_file_says_so(tmp_path):
    # Refused before launch, not "Resuming from step 0 (it has no checkpoint yet)" followed by a
    # process failing with "…/checkpoints holds no checkpoint to restore".
    from distcore.config import TrainConfig

    (tmp_path / "config.json").write_text(json.dumps(TrainConfig(devices=("cpu:0",)).to_dict()))
    (tmp_path / "checkpoints").write_text("")
    with pytest.raises(
        DistcoreError,
        match=r"^cannot resume: .*checkpoints is a file, not the run's folder of "
        r"checkpoints\. Move it away; with no checkpoints the run trains again "
        r"from step 0\.$",
    ):
        runs.resume_config(tmp_path)


def test_a_clusters_run_resumed_in_one_process_keeps_its_replica_count():
    from distcore.config import TrainConfig

    def saved(devices, workers):
        return TrainConfig(devices=devices, workers=workers, global_batch=96)

    assert runs.one_process_devices(saved(("cpu:0",), 3)) == ("cpu:0", "cpu:1", "cpu:2")
    assert runs.one_process_devices(saved(("cpu:0", "cpu:1"), 2)) == ("cpu:0", "cpu:1", "cpu:2", "cpu:3")
    assert runs.one_process_devices(saved(("cpu:3",), 1)) == ("cpu:3",)  # not a cluster's: its own
    assert runs.one_process_devices(saved(("gpu:0",), 2)) == ("gpu:0",)  # GPUs this host may not have
    assert len(runs.one_process_devices(saved(("cpu:0",), 24))) == 16  # as many as one process can make


def test_truncation_drops_records_of_epochs_the_checkpoint_had_not_closed(tmp_path):
    lines = [{"step": 2, "loss": 1.0}, {"epoch": 1, "step": 2, "train_loss": 1.0}, {"event": "checkpoint", "step": 2}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert runs.truncate_metrics(tmp_path, 2, epochs=1) == 0
    assert runs.truncate_metrics(tmp_path, 2, epochs=0) == 1  # the resume closes epoch 1 again
    assert [r for r in runs.read_metrics(tmp_path) if "train_loss" in r] == []


def test_an_export_removes_exports_older_than_an_hour_and_keeps_newer_ones(tmp_path, monkeypatch):
    import os
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    first = runs.export_folder()
    (first / "r1-metrics.csv").write_text("kind,step\n")
    second = runs.export_folder()
    other = tmp_path / "someone-elses"
    other.mkdir()
    hour_ago = first.stat().st_mtime - runs.EXPORT_KEPT_SECONDS - 1
    for folder in (first, other):
        os.utime(folder, (hour_ago, hour_ago))
    third = runs.export_folder()
    assert not first.exists()  # its files were long since copied into Gradio's cache
    assert second.is_dir() and third.is_dir() and other.is_dir()
    assert {second.parent, third.parent} == {tmp_path} and second != third


@pytest.mark.parametrize(
    "saved,problem",
    [
        ({}, "the configuration has no devices."),
        ({"devices": ["cpu:0"], "global_batch": "x"}, "global batch size ('x')"),
    ],
)
def test_a_config_json_that_makes_no_configuration_is_called_damaged(tmp_path, capsys, saved, problem):
    # `echo '{}' > RUN/config.json`, then evaluate or train --resume: called damaged, not a TypeError
    # traceback ("TrainConfig.__init__() missing 1 required positional argument: 'devices'").
    from distcore import cli

    run_dir = tmp_path / "r"
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps(saved))
    for command in ("evaluate", "train --resume"):
        assert cli.main([*command.split(), "--run-dir", str(run_dir), "--json"]) == 2
        out, err = capsys.readouterr()
        assert json.loads(out)["error"] == err.strip().removeprefix("error: ")
        assert err.startswith(f"error: {run_dir / 'config.json'} is incomplete or damaged: {problem}")
        assert err.strip().endswith("Restore the file, or start a new run.")


def test_a_run_dir_too_long_for_the_filesystem_or_that_is_a_file_is_refused(tmp_path, capsys):
    # A name over 255 characters is refused up front, not "OSError: [Errno 36] File name too long"
    # from stopping.announce; a file is called a file, not "cannot write ... afile: File exists."
    from distcore import cli

    (tmp_path / "afile").write_text("")
    long_name = tmp_path / ("a" * 256)
    for command in ("train", "train --resume", "evaluate"):
        assert cli.main([*command.split(), "--run-dir", str(long_name), "--json"]) == 2
        assert json.loads(capsys.readouterr()[0])["error"] == (
            f"argument --run-dir: the run directory's name {'a' * 40!r}… is 256 bytes long; a folder's name can "
            "have at most 255: choose a shorter one."
        )
        assert cli.main([*command.split(), "--run-dir", str(tmp_path / "afile"), "--json"]) == 2
        assert json.loads(capsys.readouterr()[0])["error"] == (
            f"argument --run-dir: the run directory {tmp_path / 'afile'} is a file, not a folder: name a folder "
            "for the run."
        )
    with pytest.raises(DistcoreError, match="cannot be used: File name too long"):
        runs.run_path("/".join(["b" * 200] * 30))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_a_run_dir_under_the_home_folder_may_be_written_with_a_tilde(tmp_path, monkeypatch):
    # `--run-dir=~/runs/t2` (the shell leaves a ~ after "=") is the home folder's, not a folder named "~" here.
    monkeypatch.setenv("HOME", str(tmp_path))
    assert runs.run_path("~/runs/t2") == tmp_path / "runs" / "t2"
    assert runs.run_path("~") == tmp_path
    # In an ASCII locale (LC_ALL=POSIX PYTHONUTF8=0) a path read from argv is not UTF-8
    # text: refused as such, not every checkpoint's files called "damaged or incomplete".
    with pytest.raises(
        DistcoreError,
        match=r"the run directory /tmp/C\\udcc3\\udca9 is not UTF-8 text as this process "
        r"read it .* use a UTF-8 locale \(LANG=C.UTF-8, or PYTHONUTF8=1\)\.$",
    ):
        runs.run_path("/tmp/C\udcc3\udca9")


def test_a_run_locked_by_another_process_names_it(tmp_path):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from distcore import runs; "
            "lock = runs.RunLock(sys.argv[1]); print('held', flush=True); time.sleep(60)",
            str(tmp_path),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(DistcoreError, match=rf"is being trained by process {holder.pid} right now: stop it"):
            runs.RunLock(tmp_path)
    finally:
        holder.kill()
        holder.wait()
    runs.RunLock(tmp_path).release()  # the kernel let go with the process


def test_a_failure_recorded_by_the_launcher_drops_the_running_speed_and_eta(tmp_path):
    # A chief killed while running is marked "failed" without its last examples/s and ETA.
    runs.write_json_atomic(tmp_path / "config.json", {"epochs": 1})
    runs.write_json_atomic(
        tmp_path / "status.json",
        {"state": "running", "step": 80, "pid": 1, "total_steps": 94, "examples_per_sec": 2812.2, "eta_seconds": 13.0},
    )
    runs.record_failure(tmp_path, "worker 0 was killed by SIGKILL")
    status = runs.read_status(tmp_path)
    assert {k: status[k] for k in ("state", "step", "total_steps", "message")} == {
        "state": "failed",
        "step": 80,
        "total_steps": 94,
        "message": "worker 0 was killed by SIGKILL",
    }
    assert "examples_per_sec" not in status and "eta_seconds" not in status
    assert runs.read_metrics(tmp_path)[-1]["event"] == "failed"


def test_a_failure_before_the_run_was_set_up_is_still_its_final_status(tmp_path):
    # A cluster whose worker died before the chief wrote config.json is marked "failed", not left
    # with the launcher's "starting" status, which the app shows as "died".
    runs.write_json_atomic(tmp_path / "status.json", {"state": "starting", "pid": 1, "total_steps": 94})
    runs.record_failure(tmp_path, "worker 0 was killed by SIGKILL")
    status = runs.read_status(tmp_path)
    assert (status["state"], status["message"]) == ("failed", "worker 0 was killed by SIGKILL")
    assert not (tmp_path / "metrics.jsonl").exists()
    runs.record_failure(tmp_path / "none", "worker 0 was killed by SIGKILL")  # not a run: nothing written
    assert not (tmp_path / "none").exists()


def test_a_read_only_filesystem_is_a_plain_error(tmp_path, monkeypatch):
    # Resuming a run on a read-only mount is a message, not a traceback, though the clean-up of
    # the temporary file fails with EROFS too.
    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(Path, "write_text", read_only)
    monkeypatch.setattr(Path, "unlink", read_only)
    with pytest.raises(DistcoreError, match=rf"^cannot write {tmp_path / 'status.json'}: Read-only file system\.$"):
        runs.write_json_atomic(tmp_path / "status.json", {"state": "starting"})


def test_a_run_folder_that_never_trained_takes_a_new_run_and_one_that_did_does_not(tmp_path):
    # A chief killed while it waited for its peers leaves only config.json: the same command may
    # start there again. Metrics, a checkpoint or a live process of the run keep it.
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.json").write_text("{}")
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    ).stdout.strip()
    runs.write_status(run_dir, {"state": "starting", "pid": int(gone)})
    runs.check_new(run_dir)
    with subprocess.Popen(["sleep", "60"]) as alive:
        runs.write_status(run_dir, {"state": "starting", "pid": alive.pid})
        with pytest.raises(DistcoreError, match="already holds a run"):
            runs.check_new(run_dir)
        alive.kill()
    runs.write_status(run_dir, {"state": "stopped", "pid": int(gone)})
    for trace in ("metrics.jsonl", "checkpoints/ckpt-5.index"):
        (run_dir / trace).parent.mkdir(exist_ok=True)
        (run_dir / trace).write_text("")
        with pytest.raises(DistcoreError, match="already holds a run"):
            runs.check_new(run_dir)
        (run_dir / trace).unlink()


def test_a_record_tail_gives_whole_new_lines_once_and_follows_a_roll_back(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(json.dumps({"step": 1, "loss": 2.0, "time": 5.0}) + "\n")  # before `since`: not given
    tail = runs.RecordTail(tmp_path, since=10.0)
    assert tail.new() == []
    with path.open("a") as f:
        f.write(json.dumps({"step": 2, "loss": 1.5, "time": 11.0}) + "\n" + '{"step": 3, "lo')  # a line in writing
        f.flush()
        assert tail.new() == [{"step": 2, "loss": 1.5, "time": 11.0}]
        f.write('ss": 1.2, "time": 12.0}\n')
    assert tail.new() == [{"step": 3, "loss": 1.2, "time": 12.0}] and tail.new() == []
    runs.truncate_metrics(tmp_path, step=2)  # a restart rolls back to step 2, and trains step 3 again
    with path.open("a") as f:
        f.write(json.dumps({"step": 3, "loss": 1.25, "time": 13.0}) + "\n")
    assert tail.new() == [{"step": 3, "loss": 1.25, "time": 13.0}]
