"""distcore.jobs: background training processes, CLI calls and the split planner.

Real TensorFlow in subprocesses, on short trainings over real Fashion-MNIST.
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from conftest import fill_disk, tmpfs, wait_for
from distcore import jobs, runs, stopping
from distcore.config import DistcoreError

SHORT = [
    "--replicas",
    "2",
    "--global-batch",
    "64",
    "--train-examples",
    "2048",
    "--test-examples",
    "1000",
    "--max-steps",
    "20",
    "--steps-per-loop",
    "5",
]
# Long enough to be stopped part-way: 938 steps at ~1000 examples/s.
LONG = [
    "--replicas",
    "2",
    "--global-batch",
    "64",
    "--train-examples",
    "60000",
    "--test-examples",
    "500",
    "--steps-per-loop",
    "5",
]


def no_zombie_children():
    me = str(os.getpid())
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = open(f"/proc/{pid}/stat").read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[1] == me and fields[0] == "Z":
            return False
    return True


@pytest.fixture(scope="module")
def planner():
    p = jobs.Planner()
    yield p
    p.close()


def test_options_to_args():
    assert jobs.options_to_args(
        {"global_batch": 64, "drop_remainder": True, "max_steps": None, "devices": ["cpu:0", "cpu:1"], "resume": False}
    ) == ["--global-batch", "64", "--drop-remainder", "--devices", "cpu:0,cpu:1"]
    assert jobs.options_to_args(["--epochs", 2]) == ["--epochs", "2"]


@pytest.mark.slow
def test_run_cli_json_returns_json_and_raises_the_cli_message():
    assert jobs.run_cli_json(["devices"], timeout=120)["max_logical_cpus"] >= 2
    with pytest.raises(DistcoreError, match="larger than the dataset"):
        jobs.run_cli_json(["split", "--examples", "4", "--global-batch", "8", "--replicas", "2"])


def test_planner_reproduces_the_seed_examples(planner):
    def ids(n, g, r):
        return planner.plan({"examples": n, "global_batch": g, "replicas": r})["steps"]

    assert ids(6, 4, 2) == [[[0, 1], [2, 3]], [[4], [5]]]
    assert ids(4, 4, 5) == [[[0], [1], [2], [3], []]]
    assert ids(8, 4, 3) == [[[0, 1], [2, 3], []], [[4, 5], [6, 7], []]]
    assert planner.max_replicas == 16


def test_planner_reports_errors_and_restarts_after_dying(planner):
    with pytest.raises(DistcoreError, match="larger than the dataset"):
        planner.plan({"examples": 4, "global_batch": 8, "replicas": 2})
    planner._proc.kill()  # a crash: the next request starts a new planner
    planner._proc.wait()
    started = time.monotonic()
    assert planner.plan({"examples": 6, "global_batch": 4, "replicas": 2})["replicas"] == 2
    assert time.monotonic() - started < 60


@pytest.mark.parametrize("name", ["../x", "/etc", "a/b", "..", "", "bad name"])
def test_start_training_refuses_bad_run_names(tmp_path, name):
    with pytest.raises(DistcoreError):
        jobs.start_training(tmp_path, name, SHORT)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("flag", [["--run-dir", "runs/x"], ["--run-dir=runs/x"]])
def test_a_trainer_is_recognised_by_a_relative_run_dir_in_either_form(tmp_path, flag):
    # A stand-in with a trainer's command line, started in tmp_path as a CLI user would.
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "-m", "distcore", "train", *flag], cwd=tmp_path
    )
    try:
        assert wait_for(lambda: "train" in jobs.pid_cmdline(proc.pid), timeout=10)
        assert jobs.is_train_process(proc.pid, tmp_path / "runs" / "x")
        assert not jobs.is_train_process(proc.pid, tmp_path / "runs" / "y")
        with pytest.raises(DistcoreError, match=f"is still training \\(process {proc.pid}\\)"):
            (tmp_path / "runs" / "x").mkdir(parents=True)
            (tmp_path / "runs" / "x" / "status.json").write_text(json.dumps({"state": "running", "pid": proc.pid}))
            jobs.check_not_training(tmp_path / "runs" / "x")
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.slow
def test_short_training_finishes_and_is_reaped(tmp_path):
    pid = jobs.start_training(tmp_path, "short", SHORT)
    run_dir = tmp_path / "short"
    assert jobs.count_running(tmp_path) == 1  # counted at once, before status.json exists
    assert jobs.is_train_process(pid, run_dir)
    assert jobs.wait_until_done(run_dir, timeout=180)
    p = jobs.job_progress(run_dir)
    assert (p.state, p.active, p.step) == ("finished", False, 20)
    assert p.checkpoints and p.checkpoints[-1] == "ckpt-20"
    assert any("finished" in line for line in p.log_lines)
    assert jobs.count_running(tmp_path) == 0
    assert wait_for(no_zombie_children, timeout=5)
    assert not jobs.stop_training(run_dir)  # nothing to stop any more
    with pytest.raises(DistcoreError, match="already exists"):
        jobs.start_training(tmp_path, "short", SHORT)


@pytest.mark.slow
def test_stop_checkpoints_and_resume_continues(tmp_path):
    run_dir = tmp_path / "long"
    jobs.start_training(tmp_path, "long", LONG)
    assert wait_for(lambda: runs.last_logged_step(run_dir) >= 10, timeout=120)
    assert jobs.stop_training(run_dir)
    assert jobs.wait_until_done(run_dir, timeout=120)
    stopped = jobs.job_progress(run_dir)
    assert stopped.state == "stopped"
    assert stopped.checkpoints, "a stop saves a checkpoint"
    stop_step = runs.checkpoint_step(stopped.checkpoints[-1])
    assert 10 <= stop_step < 938

    jobs.start_training(tmp_path, "long", ["--max-steps", str(stop_step + 10)], resume=True)
    # From its first status on, the resumed process shows its own total (not 938 / 938 while starting).
    shown = []
    while jobs.is_active(run_dir):
        p = jobs.job_progress(run_dir)
        if p.state in ("starting", "running"):
            shown.append((p.state, p.total_steps))
        time.sleep(0.05)
    assert shown and shown[0][0] == "starting" and {total for _, total in shown} == {stop_step + 10}
    resumed = jobs.job_progress(run_dir)
    assert resumed.state == "finished"
    assert resumed.step == stop_step + 10
    events = [m["event"] for m in runs.read_metrics(run_dir) if "event" in m]
    assert "stopped" in events and "resume" in events


def test_a_ray_run_is_launched_as_its_driver_which_the_apps_stop_signals(tmp_path, monkeypatch):
    # A stand-in with the driver's command line (`distcore train --engine ray --workers 2 ...`):
    # the launched pid is the driver, which passes a stop on to Ray's workers.
    stand_in = [sys.executable, "-c", "import time; time.sleep(60)", "-m", "distcore"]
    monkeypatch.setattr(jobs, "cli_command", lambda *args: [*stand_in, *args])
    pid = jobs.start_training(tmp_path, "on-ray", SHORT, workers=2, engine="ray", ray_address="10.0.0.1:6379")
    run_dir = tmp_path / "on-ray"
    try:
        assert jobs.pid_cmdline(pid)[len(stand_in) :][:7] == [
            "train", "--engine", "ray", "--workers", "2", "--ray-address=10.0.0.1:6379", "--run-dir",
        ]  # fmt: skip
        assert jobs.job_pid(run_dir) == pid and jobs.is_active(run_dir)
        assert jobs.launch_record(run_dir)["engine"] == jobs.launched_engine(run_dir) == "ray"
        assert "$ distcore train --engine ray --workers 2" in (run_dir / jobs.LOG_FILE).read_text()
        with pytest.raises(DistcoreError, match="run 'on-ray' is already training"):
            jobs.start_training(tmp_path, "on-ray", SHORT, resume=True, workers=2, engine="ray")
        # The driver names itself in a "starting" status as it begins (StopFlag.announce): the stop is its.
        runs.write_status(run_dir, {"state": "starting", "pid": pid})
        assert jobs.stop_training(run_dir, startup_timeout=5)
        assert wait_for(lambda: not runs.pid_alive(pid), timeout=10)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert jobs.launched_engine(tmp_path / "none") == "local"


def test_stop_refuses_a_pid_that_is_not_the_runs_trainer(tmp_path):
    run_dir = tmp_path / "fake"
    run_dir.mkdir()
    # status.json names a live process that is not a distcore trainer: never signal it.
    runs.write_json_atomic(run_dir / "status.json", {"state": "running", "pid": os.getpid()})
    assert not jobs.is_active(run_dir)
    assert not jobs.stop_training(run_dir)
    assert jobs.job_progress(run_dir).state == "died"


def test_a_run_that_could_not_write_its_status_shows_the_failure_its_log_holds(tmp_path):
    # A process that fails on a full disk, or a read-only or moved folder, logs "failed" but
    # cannot write status.json: the run shows that failure, not "died ... (killed, or a crash)"
    # at the step of its last status.
    run_dir = tmp_path / "full"
    run_dir.mkdir()
    log = runs.MetricsLog(run_dir)
    log.write({"event": "start", "step": 0, "message": "training 376 steps on cpu:0"})
    runs.write_json_atomic(
        run_dir / "status.json",
        {"state": "running", "pid": os.getpid(), "step": 60, "total_steps": 376, "time": time.time()},
    )
    assert jobs.job_progress(run_dir).state == "died"  # gone, and its log does not say why
    time.sleep(0.01)
    log.write({"event": "failed", "step": 80, "message": "cannot write status.json: No space left on device."})
    log.close()
    shown = jobs.job_progress(run_dir)
    assert (shown.state, shown.step, shown.message) == (
        "failed",
        80,
        "cannot write status.json: No space left on device.",
    )
    assert jobs.run_state(run_dir) == "failed"  # the run pickers' label
    # A failure logged before the status was written is an earlier process's: this one died.
    runs.write_json_atomic(
        run_dir / "status.json",
        {"state": "starting", "pid": os.getpid(), "step": 80, "total_steps": 376, "time": time.time()},
    )
    assert jobs.job_progress(run_dir).state == "died" and jobs.run_state(run_dir) == "died"
    # When metrics.jsonl cannot be written either (5 of 12 full disks), the error: line the
    # process ended train.log with says why.
    with open(run_dir / "metrics.jsonl", "a") as log:
        log.write(json.dumps({"step": 81, "epoch": 1, "loss": 0.5, "examples": 64}) + '\n{"step": 8')  # torn
    time.sleep(0.05)  # (a file's time comes from a coarser clock than time.time())
    (run_dir / jobs.LOG_FILE).write_text(
        "$ distcore train ...\nerror: cannot write metrics.jsonl: No space left.\n"
        "I0000 00:00:1795527809 port.cc:153] oneDNN custom operations are on.\n"
    )
    shown = jobs.job_progress(run_dir)
    assert (shown.state, shown.step, shown.message) == ("failed", 81, "cannot write metrics.jsonl: No space left.")
    assert jobs.run_state(run_dir) == "failed"
    # A damaged status.json (cut short by hand) does not read "unknown": the logs say how it ended.
    (run_dir / "status.json").write_text('{"state": "runn')
    assert (jobs.run_state(run_dir), jobs.job_progress(run_dir).message) == (  # the metrics' last event
        "failed",
        "cannot write status.json: No space left on device.",
    )
    (run_dir / "metrics.jsonl").unlink()
    assert (jobs.run_state(run_dir), jobs.job_progress(run_dir).message) == (  # train.log's error: line
        "failed",
        "cannot write metrics.jsonl: No space left.",
    )
    (run_dir / jobs.LOG_FILE).unlink()
    assert jobs.run_state(run_dir) == "unknown"


def test_a_full_runs_folder_is_a_plain_error_and_leaves_no_empty_run(tmp_path):
    # Start training on a full disk is a DistcoreError (not an OSError from opening train.log,
    # which the page shows as a bare "Error"), and no empty folder stays behind.
    with tmpfs(tmp_path / "disk", "size=64k,nr_inodes=16") as disk:
        fill_disk(disk)
        with pytest.raises(
            DistcoreError,
            match=rf"^cannot write to the run directory {disk / 'new'}: "
            r"No space left on device\.$",
        ):
            jobs.start_training(disk, "new", ["--train-examples", "640"])
        assert not (disk / "new").exists()
        for i in range(200):  # and the inodes: an automatic name's folder cannot be made either
            with contextlib.suppress(OSError):
                (disk / f"d{i}").mkdir()
        with pytest.raises(DistcoreError, match=f"^cannot make a run folder in {disk}: No space left on device\\.$"):
            runs.claim_new_name(disk)


def test_a_cli_call_killed_by_a_signal_says_so(monkeypatch):
    # A CLI call the OOM killer took is named as killed, not "distcore exited with code -9:
    # I0000 ... oneDNN custom operations are on ...".
    killed = (
        "import os, signal, sys; print('I0000 00:00 port.cc:153] oneDNN', file=sys.stderr); os.kill(os.getpid(), 9)"
    )
    monkeypatch.setattr(jobs, "cli_command", lambda *args: [sys.executable, "-c", killed])
    with pytest.raises(DistcoreError, match=r"^the distcore process was killed by SIGKILL \(out of memory\?\)$"):
        jobs.run_cli_json(["evaluate"])


@pytest.mark.slow
def test_two_launches_of_one_run_at_once_start_one_process(tmp_path):
    # Two apps on one runs folder launching one run at once: one starts it, the other is told
    # so, rather than both saying "Started" and the second failing on the lock in train.log.
    barrier, outcomes = threading.Barrier(2), []

    def start():
        barrier.wait()
        try:
            outcomes.append(jobs.start_training(tmp_path, "twice", SHORT))
        except DistcoreError as err:
            outcomes.append(str(err))

    threads = [threading.Thread(target=start) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(map(type, outcomes), key=str) == [int, str], outcomes
    assert next(o for o in outcomes if isinstance(o, str)) == "run 'twice' is already training"
    assert jobs.wait_until_done(tmp_path / "twice", timeout=300)
    assert jobs.job_progress(tmp_path / "twice").state == "finished"


def test_resume_needs_a_run(tmp_path):
    with pytest.raises(DistcoreError, match="never started, so there is nothing to resume"):
        jobs.start_training(tmp_path, "nothing", [], resume=True)


@pytest.mark.slow
def test_stop_right_after_start_still_stops_cleanly(tmp_path):
    # Before the trainer has installed its SIGTERM handler a signal would kill it
    # outright; stop_training waits for the handler (status.json) first.
    run_dir = tmp_path / "early"
    jobs.start_training(tmp_path, "early", LONG)
    assert jobs.stop_training(run_dir)
    assert jobs.wait_until_done(run_dir, timeout=120)
    assert jobs.job_progress(run_dir).state == "stopped"
    if runs.read_status(run_dir)["message"] == stopping.BEFORE_TRAINING:  # the log says so too
        assert "stopped before training began: nothing to save." in (run_dir / jobs.LOG_FILE).read_text()


@pytest.mark.slow
def test_the_apps_sigterm_waits_for_a_loading_run_and_names_runs_still_going(tmp_path):
    # The app's SIGTERM right after Start waits for the loading process's handler (killed, it
    # would read "unknown"), and runs still in a long loop when the app leaves are named as going.
    jobs.start_training(tmp_path, "early", LONG)
    assert jobs.stop_own_runs(tmp_path) == (["early"], [])  # signalled once its handler was in place
    assert runs.read_status(tmp_path / "early")["message"] == stopping.BEFORE_TRAINING
    jobs.start_training(tmp_path, "long", LONG)
    assert wait_for(lambda: jobs.ready_to_stop(tmp_path / "long", jobs.launched_pid(tmp_path / "long")), timeout=120)
    assert jobs.stop_own_runs(tmp_path, timeout=0) == ([], ["long"])  # no time to end: named as going
    assert jobs.wait_until_done(tmp_path / "long", timeout=120)
    assert runs.read_status(tmp_path / "long")["state"] == "stopped"


def test_right_after_a_resume_the_previous_processs_status_is_not_shown_as_live(tmp_path):
    # At the first poll after Resume the run is "starting", with no speed or ETA, not the old
    # process's "running · step 200 / 564 · 5,599 examples/s · ETA 9s".
    run_dir = tmp_path / "again"
    run_dir.mkdir()
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    ).stdout.strip()
    runs.write_json_atomic(
        run_dir / "status.json",
        {
            "state": "running",
            "pid": int(gone),
            "step": 200,
            "total_steps": 564,
            "examples_per_sec": 5599.0,
            "eta_seconds": 9.0,
            "time": time.time(),
        },
    )
    resumed = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time; time.sleep(60)",
            "-m",
            "distcore",
            "train",
            "--run-dir",
            str(run_dir),
            "--resume",
        ]
    )  # a stand-in, setting up
    try:
        assert wait_for(lambda: "train" in jobs.pid_cmdline(resumed.pid), timeout=10)
        (run_dir / jobs.JOB_FILE).write_text(json.dumps({"pid": resumed.pid, "resume": True}))
        shown = jobs.job_progress(run_dir)
        assert (shown.state, shown.active, shown.examples_per_sec, shown.eta_seconds) == ("starting", True, None, None)
        assert jobs.run_state(run_dir) == "starting"
    finally:
        resumed.kill()
        resumed.wait()


@pytest.mark.slow
def test_a_training_process_that_makes_no_progress_is_named_as_stuck(tmp_path, monkeypatch):
    # A hung process is named as stuck, not "running · ETA 5s" for good while Stop says
    # "Stopping" each time, to no effect.
    run_dir = tmp_path / "hung"
    pid = jobs.start_training(tmp_path, "hung", LONG)
    assert wait_for(lambda: jobs.job_progress(run_dir).state == "running", timeout=120)
    assert jobs.job_progress(run_dir).message == ""
    os.kill(pid, signal.SIGSTOP)  # as a hang: no step, no status
    try:
        monkeypatch.setattr(jobs, "STALLED_SECONDS", 1)
        time.sleep(1.5)
        status = runs.read_status(run_dir)
        note = jobs.job_progress(run_dir).message
        assert note.startswith(f"No progress since {time.strftime('%H:%M:%S', time.localtime(status['time']))} (")
        assert f"its process ({pid}) may be stuck" in note
    finally:
        os.kill(pid, signal.SIGCONT)
    assert jobs.stop_training(run_dir) and jobs.wait_until_done(run_dir, timeout=120)
    assert jobs.job_progress(run_dir).message == ""  # a final state's own message


# Two worker processes of one MultiWorkerMirroredStrategy, 400 steps: long enough to stop part-way.
PAIR = [
    "--global-batch",
    "64",
    "--train-examples",
    "12800",
    "--test-examples",
    "500",
    "--epochs",
    "2",
    "--steps-per-loop",
    "5",
    "--seed",
    "3",
]


# Two workers, 10 steps: a short run to resume.
SMALL_PAIR = [
    "--global-batch",
    "64",
    "--train-examples",
    "640",
    "--test-examples",
    "200",
    "--epochs",
    "1",
    "--steps-per-loop",
    "5",
]


def child_pids(pid) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(p) for p in f.read().split()]


@pytest.mark.slow
def test_a_two_worker_run_stops_at_one_step_and_resumes(tmp_path):
    # "Stop training" in the app: jobs.stop_training SIGTERMs the cluster launcher, which
    # passes it on; both workers must leave the loop at the same step and save it.
    run_dir = tmp_path / "pair"
    launcher = jobs.start_training(tmp_path, "pair", PAIR, workers=2)
    assert wait_for(lambda: runs.last_logged_step(run_dir) >= 10, timeout=180)
    workers = child_pids(launcher)
    assert len(workers) == 2
    assert jobs.stop_training(run_dir)
    assert jobs.wait_until_done(run_dir, timeout=120)
    assert not any(runs.pid_alive(pid) for pid in workers)
    stopped = jobs.job_progress(run_dir)
    assert stopped.state == "stopped"
    stop_step = runs.checkpoint_step(stopped.checkpoints[-1])
    assert 10 <= stop_step < 400 and stopped.step == stop_step
    metrics = runs.read_metrics(run_dir)
    assert [m["step"] for m in metrics if m.get("event") == "stopped"] == [stop_step]
    assert max(m["step"] for m in metrics if "loss" in m) == stop_step

    jobs.start_training(tmp_path, "pair", ["--max-steps", str(stop_step + 10)], resume=True, workers=2)
    assert jobs.wait_until_done(run_dir, timeout=180)
    resumed = jobs.job_progress(run_dir)
    assert (resumed.state, resumed.step) == ("finished", stop_step + 10)
    steps = [m["step"] for m in runs.read_metrics(run_dir) if "loss" in m]
    assert steps == list(range(1, stop_step + 11))


@pytest.mark.slow
def test_the_apps_stop_of_a_cli_cluster_reaches_its_launcher(tmp_path):
    # A `cluster` from the CLI has no job.json and its status names the chief: the app's stop
    # reaches the launcher, which exits 143, so `cluster ... && next` does not go on.
    run_dir = tmp_path / "pair"
    launcher = subprocess.Popen(
        [sys.executable, "-m", "distcore", "cluster", "--workers", "2", "--run-dir", str(run_dir), *PAIR],
        cwd=jobs.REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert wait_for(lambda: runs.last_logged_step(run_dir) >= 10, timeout=180)
        assert runs.read_status(run_dir)["pid"] != launcher.pid  # the chief's
        assert jobs.stop_training(run_dir)
        assert launcher.wait(timeout=120) == 128 + signal.SIGTERM
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert runs.read_status(run_dir)["state"] == "stopped"


@pytest.mark.slow
def test_a_two_worker_resume_stopped_before_its_first_step_ends_stopped(tmp_path):
    # Stop a second after Resume ends "stopped": both workers skip the save of the step resumed
    # from (worker 1's own folder lacks that checkpoint), so none waits in the save's test pass
    # for a chief that has left ("RecvBuf ... Socket closed").
    run_dir = tmp_path / "pair"
    jobs.start_training(tmp_path, "pair", SMALL_PAIR, workers=2)
    assert jobs.wait_until_done(run_dir, timeout=180)
    assert runs.read_status(run_dir)["state"] == "finished"
    checkpoints = runs.list_checkpoints(run_dir)
    launcher = jobs.start_training(tmp_path, "pair", ["--epochs", "2"], resume=True, workers=2)
    # Once the chief has announced itself (before the launcher's workers start, a stop ends
    # the launcher alone), and long before the workers' first step.
    assert wait_for(lambda: (runs.read_status(run_dir) or {}).get("pid") in child_pids(launcher), poll=0.01)
    assert jobs.stop_training(run_dir)
    assert jobs.wait_until_done(run_dir, timeout=180)
    status = runs.read_status(run_dir)
    assert (status["state"], status["step"]) == ("stopped", 10), status.get("message")
    assert runs.list_checkpoints(run_dir) == checkpoints
    events = [m["event"] for m in runs.read_metrics(run_dir) if "event" in m]
    assert events[-2:] == ["resume", "stopped"] and "failed" not in events


@pytest.mark.slow
def test_a_two_worker_resume_shows_starting_with_its_new_total_at_once(tmp_path):
    # The launcher announces itself at once, as a single process does: no ~5 s of the old
    # "finished" (and old total) until a worker announces itself.
    run_dir = tmp_path / "r"
    jobs.start_training(tmp_path, "r", ["--replicas", "1", *SMALL_PAIR])
    assert jobs.wait_until_done(run_dir, timeout=120)
    before = runs.read_status(run_dir)
    assert (before["state"], before["total_steps"]) == ("finished", 10)
    launcher = jobs.start_training(tmp_path, "r", ["--epochs", "2"], resume=True, workers=2)
    assert wait_for(lambda: runs.read_status(run_dir) != before, timeout=30, poll=0.01)
    status = runs.read_status(run_dir)
    assert (status["state"], status["pid"], status["total_steps"], status["step"]) == ("starting", launcher, 20, 10)
    assert jobs.job_progress(run_dir).state == "starting"
    assert jobs.stop_training(run_dir)  # the launcher is ready for it: it stops before training, the run kept
    assert jobs.wait_until_done(run_dir, timeout=120)
    # As it was, beside its config.json of 10 steps (not "stopped 10/20", after which a plain
    # resume would say "already finished").
    assert runs.read_status(run_dir) == before and runs.read_config(run_dir)["epochs"] == 1
    assert runs.list_checkpoints(run_dir) == ["ckpt-10"]


@pytest.mark.slow
def test_a_resume_killed_while_it_sets_up_shows_the_runs_own_total(tmp_path):
    # A resume killed with SIGKILL before training begins leaves its new total in the status;
    # the run shows config.json's 10 steps, not "died · step 10 / 20".
    run_dir = tmp_path / "k"
    jobs.start_training(tmp_path, "k", ["--replicas", "1", *SMALL_PAIR])
    assert jobs.wait_until_done(run_dir, timeout=120)
    pid = jobs.start_training(tmp_path, "k", ["--epochs", "2"], resume=True)
    assert wait_for(lambda: (runs.read_status(run_dir) or {}).get("state") == "starting", timeout=30, poll=0.01)
    os.kill(pid, signal.SIGKILL)
    assert jobs.wait_until_done(run_dir, timeout=30)
    assert runs.read_status(run_dir)["total_steps"] == 20 and runs.read_config(run_dir)["epochs"] == 1
    shown = jobs.job_progress(run_dir)
    assert (shown.state, shown.step, shown.total_steps) == ("died", 10, 10)


@contextlib.contextmanager
def stand_in(run_dir, command: str):
    """A process whose command line reads as `distcore COMMAND --run-dir RUN_DIR`, sleeping."""
    run_dir.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "-m", "distcore", command, "--run-dir", str(run_dir)]
    )
    try:
        assert wait_for(lambda: command in jobs.pid_cmdline(proc.pid), timeout=10)
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_a_stopped_run_whose_cluster_is_still_exiting_is_not_called_training(tmp_path):
    # A stand-in for a cluster launcher still waiting for its workers after the chief wrote "stopped".
    run_dir = tmp_path / "pair"
    with stand_in(run_dir, "cluster") as proc:
        (run_dir / jobs.JOB_FILE).write_text(json.dumps({"pid": proc.pid}))
        (run_dir / "config.json").write_text("{}")
        runs.write_json_atomic(run_dir / "status.json", {"state": "stopped", "pid": 1})
        message = (
            f"run 'pair' has stopped, but its process {proc.pid} is still shutting down (a cluster waits "
            "for its workers to exit); try again in a few seconds."
        )
        with pytest.raises(DistcoreError) as refused:
            jobs.start_training(tmp_path, "pair", [], resume=True, workers=2)
        assert str(refused.value) == message
        with pytest.raises(DistcoreError, match=f"{run_dir} has stopped, but its process {proc.pid} is still "):
            jobs.check_not_training(run_dir)
        runs.write_json_atomic(run_dir / "status.json", {"state": "running", "pid": proc.pid})
        with pytest.raises(DistcoreError, match="run 'pair' is already training"):
            jobs.start_training(tmp_path, "pair", [], resume=True, workers=2)


def test_a_run_a_library_caller_trains_is_active_and_the_app_does_not_signal_it(tmp_path):
    # A Controller training in a script reads "running", Resume refuses to start a second
    # process, and Stop does not SIGTERM (which would end the caller's program).
    run_dir = tmp_path / "lib"
    run_dir.mkdir()
    holder = (
        "import sys, time; from distcore import runs; lock = runs.RunLock(sys.argv[1]); "
        "runs.write_json_atomic(sys.argv[1] + '/status.json', {'state': 'running', 'pid': __import__('os').getpid()}); "
        "print('held', flush=True); time.sleep(60)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", holder, str(run_dir)], cwd=jobs.REPO_ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline() == "held\n"
        assert runs.lock_holder(run_dir) == proc.pid
        assert jobs.run_state(run_dir) == "running" and jobs.job_pid(run_dir) == proc.pid
        with pytest.raises(DistcoreError, match=f"still training \\(process {proc.pid}\\)") as refused:
            jobs.check_not_training(run_dir)  # (the CLI's resume): no "kill -TERM", which would end a kernel
        assert "kill" not in str(refused.value) and "a Python program that uses distcore as a library" in str(
            refused.value
        )
        assert "close() or del a Controller made and not run" in str(refused.value)  # (Ctrl-C alone frees none)
        with pytest.raises(DistcoreError, match="uses distcore as a library: stop it there"):
            jobs.stop_training(run_dir)
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()
    assert runs.lock_holder(run_dir) is None and jobs.run_state(run_dir) == "died"


def test_no_speed_or_eta_is_shown_from_a_chunk_that_traced_or_a_previous_process(tmp_path):
    run_dir = tmp_path / "r"
    with stand_in(run_dir, "train") as proc:
        resumed = [
            {"step": 20, "loss": 1.0, "examples": 64, "examples_per_sec": 900.0},
            {"event": "resume", "step": 20},
            {"step": 21, "loss": 1.0, "examples": 64, "examples_per_sec": 12.0},
        ]  # the first chunk traced
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in resumed))
        for status in (
            {"state": "running", "examples_per_sec": None, "eta_seconds": None},  # as the trainer writes it
            {"state": "starting", "examples_per_sec": 900.0, "eta_seconds": 30},
        ):  # the last process's
            runs.write_json_atomic(run_dir / "status.json", {**status, "pid": proc.pid, "step": 21})
            p = jobs.job_progress(run_dir)
            assert p.active and (p.examples_per_sec, p.eta_seconds) == (None, None), status
        runs.write_json_atomic(
            run_dir / "status.json", {"state": "running", "pid": proc.pid, "examples_per_sec": 950.0, "eta_seconds": 8}
        )
        assert (jobs.job_progress(run_dir).examples_per_sec, jobs.job_progress(run_dir).eta_seconds) == (950.0, 8)
    # Ended: the run's examples over its loops' time, each process's first loop (it traced) left out.
    runs.write_json_atomic(run_dir / "status.json", {"state": "stopped", "pid": proc.pid})
    assert jobs.job_progress(run_dir).examples_per_sec == 900.0
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in resumed[1:]))
    assert jobs.job_progress(run_dir).examples_per_sec is None
    loops = [{"event": "start", "step": 0}] + [
        {"step": s, "loss": 1.0, "examples": 64, "examples_per_sec": rate}
        for s, rate in ((1, 7.0), (2, 7.0), (3, 1000.0), (4, 1000.0), (5, 500.0), (6, 500.0))
    ]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in loops))
    assert jobs.job_progress(run_dir).examples_per_sec == pytest.approx(256 / (2 * 0.064 + 2 * 0.128))


def test_a_stopped_run_whose_launcher_still_waits_shows_its_speed(tmp_path, monkeypatch):
    # After a 2-worker run's Stop the chief writes "stopped" while the launcher waits for its
    # workers: the page shows the run's speed meanwhile, not "– examples/s".
    records = [
        {"event": "start", "step": 0},
        {"step": 1, "loss": 2.0, "examples": 64},
        {"step": 2, "loss": 1.9, "examples": 64, "examples_per_sec": 5000.0},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    runs.write_json_atomic(tmp_path / "status.json", {"state": "stopped", "step": 2, "total_steps": 10})
    monkeypatch.setattr(jobs, "job_pid", lambda run_dir: 4242)  # the launcher, still exiting
    progress = jobs.job_progress(tmp_path)
    assert (progress.state, progress.active, progress.examples_per_sec) == ("stopped", True, 5000.0)


@pytest.mark.parametrize("program", ["distcore", "not-distcore"])
def test_a_run_of_the_installed_command_is_known_as_distcores(tmp_path, program):
    # The console script runs as [python, .../bin/distcore, train, ...]: the app's Stop signals it.
    script = tmp_path / "bin" / program
    script.parent.mkdir()
    script.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(60)\n")
    script.chmod(0o755)
    run_dir = tmp_path / "live"
    proc = subprocess.Popen([str(script), "train", "--run-dir", "live"], cwd=tmp_path)
    try:
        assert wait_for(lambda: len(jobs.pid_cmdline(proc.pid)) == 5, timeout=10)
        assert jobs.pid_cmdline(proc.pid)[1:3] == [str(script), "train"]
        assert jobs.is_distcore_command(proc.pid, run_dir) == (program == "distcore")
        assert not jobs.is_distcore_command(proc.pid, tmp_path / "other")
    finally:
        proc.kill()
        proc.wait()
