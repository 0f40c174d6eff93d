"""`python -m distcore` as a user runs it: help, JSON output, errors, stop and resume."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT, cpus
from distcore import __version__ as distcore_version, cli as distcore_cli, cluster, data, devices, runs, stopping
from distcore.config import TrainConfig

SUBCOMMANDS = ["devices", "split", "planner", "train", "evaluate", "loss-check"]


def cli(*args, check=False, timeout=300, tmpdir=None):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **({"TMPDIR": str(tmpdir)} if tmpdir else {})}
    return subprocess.run(
        [sys.executable, "-m", "distcore", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=check,
        env=env,
    )


def test_help_for_every_subcommand():
    out = cli("--help", check=True).stdout
    for command in SUBCOMMANDS:
        # The planner is an internal entry point (the app's): callable, but not in the user's list.
        assert (command in out) == (command != "planner")
    for command in SUBCOMMANDS:
        assert "usage: python -m distcore " + command in cli(command, "--help", check=True).stdout
    assert cli("--version", check=True).stdout == f"distcore {distcore_version}\n"


@pytest.mark.slow
def test_user_errors_exit_2_with_a_message_and_json():
    result = cli("split", "--examples", "4", "--global-batch", "8", "--replicas", "2", "--json")
    assert result.returncode == 2
    assert "larger than the dataset" in json.loads(result.stdout)["error"]
    assert result.stderr.strip().splitlines()[-1].startswith("error: global batch size (8)")
    result = cli("train", "--run-dir", "/tmp/x", "--devices", "cpu:0,cpu:0")
    assert result.returncode == 2 and "listed twice" in result.stderr
    assert "Traceback" not in result.stderr
    # Refused with a message: -1 would abort with TensorFlow's C++ stack trace (134), "abc" be taken in silence.
    for value in ("-1", "abc"):
        result = subprocess.run(
            [sys.executable, "-m", "distcore", "devices"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "TF_NUM_INTRAOP_THREADS": value},
        )
        assert (result.returncode, result.stderr.strip()) == (
            2,
            (
                f"error: TF_NUM_INTRAOP_THREADS='{value}' is not a number of threads: give a whole number "
                "(0: TensorFlow's default), or unset it."
            ),
        )


def test_replicas_are_refused_with_workers_and_the_message_says_what_to_use():
    result = cli("split", "--workers", "2", "--replicas", "4", "--examples", "8", "--global-batch", "4")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "error: --replicas 4 does not apply with --workers 2: each worker process has its own devices "
        "(MultiWorkerMirroredStrategy gives a CPU-only worker exactly one replica). Drop --replicas; "
        "for 4 replicas on CPU use --workers 4."
    )
    # A worker refused before it connects says its peers wait for it, as every other such refusal does.
    result = cli("train", "--multi-worker", "--run-dir", "/tmp/x", "--devices", "cpu:0,cpu:1")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "error: --devices cpu:0,cpu:1 does not apply with --multi-worker: each worker process has its own "
        "devices (MultiWorkerMirroredStrategy gives a CPU-only worker exactly one replica). Drop --devices; "
        f"on GPUs, `cluster --replicas-per-worker R` gives each local worker R GPUs. {cluster.PEERS_WAIT}"
    )
    result = cli("train", "--multi-worker", "--run-dir", "/tmp/x", "--replicas", "4")
    assert result.returncode == 2 and result.stderr.strip().endswith(f"R GPUs. {cluster.PEERS_WAIT}")


def start_train(run_dir, stdout=subprocess.PIPE):
    args = [
        "train",
        "--run-dir",
        str(run_dir),
        "--replicas",
        "2",
        "--train-examples",
        "6400",
        "--test-examples",
        "500",
        "--epochs",
        "3",
        "--steps-per-loop",
        "5",
        "--seed",
        "2",
        "--json",
    ]
    return subprocess.Popen(
        [sys.executable, "-m", "distcore", *args], cwd=ROOT, stdout=stdout, stderr=subprocess.PIPE, text=True
    )


def assert_stopped_with_a_checkpoint(run_dir):
    status = runs.read_status(run_dir)
    assert status["state"] == "stopped" and 5 <= status["step"] < 300
    assert runs.list_checkpoints(run_dir)[-1] == f"ckpt-{status['step']}"
    assert [r["event"] for r in runs.read_metrics(run_dir) if "event" in r][-1] == "stopped"


@pytest.mark.slow
def test_a_closed_terminal_sighup_stops_with_a_checkpoint(tmp_path):
    # SIGHUP stops the run with a checkpoint, not at once with its status left "running" ("died").
    proc = start_train(tmp_path / "run")
    for line in proc.stdout:
        if json.loads(line).get("step", 0) >= 5:
            break
    proc.send_signal(signal.SIGHUP)
    proc.stdout.close()  # the terminal is gone too
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGHUP, stderr[-2000:]  # a script's `&&` must not go on
    assert "distcore: stopping at the end of this loop of steps, with a checkpoint." in stderr
    assert_stopped_with_a_checkpoint(tmp_path / "run")


@pytest.mark.slow
def test_a_reader_that_leaves_stops_training_with_a_checkpoint_and_no_traceback(tmp_path):
    # `train --json | head -3` stops the run, with no BrokenPipeError traceback and no status left "running".
    head = subprocess.Popen(["head", "-3"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    proc = start_train(tmp_path / "run", stdout=head.stdin)
    head.stdin.close()  # head's, so the pipe breaks when head leaves
    assert len(head.stdout.read().splitlines()) == 3
    _, stderr = proc.communicate(timeout=120)
    # 141, as a shell reports `yes | head` (not 0, as if training had finished)
    assert proc.returncode == 128 + signal.SIGPIPE and "Traceback" not in stderr, stderr[-2000:]
    assert_stopped_with_a_checkpoint(tmp_path / "run")


@pytest.mark.slow
def test_a_split_whose_reader_left_exits_as_the_shell_reports_a_broken_pipe():
    # `split ... | head` exited 1, `train ... | head` 0: both now give what `yes | head` gives.
    read_end, write_end = os.pipe()
    os.close(read_end)  # a reader that left before the first line
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "distcore", "split", "--examples", "8", "--global-batch", "4"],
            cwd=ROOT,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
        )
    finally:
        os.close(write_end)
    assert proc.returncode == 128 + signal.SIGPIPE and "Traceback" not in proc.stderr, proc.stderr[-2000:]


@pytest.mark.slow
def test_a_cluster_whose_reader_left_exits_as_the_shell_reports_a_broken_pipe(tmp_path):
    # `cluster --json | head -3` exits 141 too: its chief stops the run, as a worker does, with
    # status 0, and the launcher does not take the run for finished.
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "distcore",
                "cluster",
                "--workers",
                "2",
                "--run-dir",
                str(tmp_path / "run"),
                "--train-examples",
                "3000",
                "--test-examples",
                "200",
                "--steps-per-loop",
                "5",
                "--json",
            ],
            cwd=ROOT,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
        )
    finally:
        os.close(write_end)
    assert proc.returncode == 128 + signal.SIGPIPE, proc.stderr[-2000:]
    assert runs.read_status(tmp_path / "run")["state"] == "stopped"


@pytest.mark.slow
def test_devices_json():
    info = json.loads(cli("devices", "--json", check=True).stdout)
    assert info["tensorflow"].startswith("2.") and info["default"]


@pytest.mark.slow
def test_sigterm_stops_at_a_step_boundary_with_a_checkpoint_then_resume_finishes(tmp_path):
    run_dir, scratch = tmp_path / "run", tmp_path / "tmp"
    scratch.mkdir()
    args = [
        "train",
        "--run-dir",
        str(run_dir),
        "--replicas",
        "2",
        "--train-examples",
        "6400",
        "--test-examples",
        "500",
        "--epochs",
        "3",
        "--steps-per-loop",
        "5",
        "--seed",
        "2",
        "--json",
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "distcore", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "TMPDIR": str(scratch)},
    )
    records = []
    for line in proc.stdout:  # wait for real progress, then ask it to stop
        records.append(json.loads(line))
        if records[-1].get("step", 0) >= 20 and "loss" in records[-1]:
            second = cli("train", "--run-dir", str(run_dir), "--resume", "--json", timeout=60)  # not a second trainer
            assert second.returncode == 2
            assert json.loads(second.stdout)["error"].startswith(f"{run_dir} is still training (process {proc.pid})")
            proc.send_signal(signal.SIGTERM)
            break
    records += [json.loads(line) for line in proc.stdout]
    assert proc.wait(timeout=120) == 128 + signal.SIGTERM  # (not 0, as if finished)
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

    evaluated = json.loads(
        cli("evaluate", "--run-dir", str(run_dir), "--no-strategy", "--json", check=True, tmpdir=scratch).stdout
    )
    final = [r for r in runs.read_metrics(run_dir) if r.get("checkpoint") == "ckpt-300"][0]
    # Trained and tested on 2 replicas (32 each), evaluated with no strategy (64): a prediction whose top two
    # logits tie to within float32 rounding may go either way, one of the 500 (+0.5 for the quotients).
    assert evaluated["checkpoint"] == "ckpt-300"
    assert evaluated["accuracy"] == pytest.approx(final["test_accuracy"], abs=1.5 / 500)
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
        message = "run done already finished at step 10 of 10: its 1 epoch ends there; raise epochs to train more."
        assert result.returncode == 2 and json.loads(result.stdout) == {"error": message}
        assert result.stderr.strip().splitlines()[-1] == "error: " + message
    result = cli("train", "--run-dir", str(finished_run), "--resume", "--epochs", "1", "--max-steps", "5")
    assert result.returncode == 2
    assert (
        "error: cannot resume done with epochs 1 and max steps 5: that makes 5 steps, and the run has "
        "already trained 10 (ckpt-10)."
    ) in result.stderr
    assert run_files(finished_run) == before  # still finished, config.json untouched
    # Refused for its devices, which only TensorFlow can check: the run is not marked "failed".
    result = cli("train", "--run-dir", str(finished_run), "--resume", "--epochs", "2", "--replicas", "17")
    assert result.returncode == 2 and "replicas (17) must be" in result.stderr
    assert run_files(finished_run) == before
    # Refused for its data folder, found missing once TensorFlow is up: not marked "failed" either.
    missing = finished_run.parent / "no-data"
    result = cli("train", "--run-dir", str(finished_run), "--resume", "--epochs", "2", "--data-dir", str(missing))
    assert result.returncode == 2 and f"--data-dir (data_dir=) {missing} lacks" in result.stderr
    assert run_files(finished_run) == before


def test_a_resume_interrupted_before_training_leaves_the_run_as_it_was(finished_run, tmp_path):
    # Ctrl-C during `train --resume --epochs 2`'s set-up leaves the run as it was, not "stopped
    # 10/20" beside a config.json of 1 epoch (or in a notebook, epochs 2 beside "finished"), which
    # would make the next plain resume train on, or be refused, by what the interrupted command asked.
    run_dir = tmp_path / "copy"
    shutil.copytree(finished_run, run_dir)
    before = run_files(run_dir)
    proc = subprocess.Popen(
        [sys.executable, "-m", "distcore", "train", "--run-dir", str(run_dir), "--resume", "--epochs", "2"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while (runs.read_status(run_dir) or {}).get("pid") != proc.pid and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "stopped before training began: nothing to save." in stderr, stderr[-2000:]
    assert run_files(run_dir) == before


@pytest.mark.slow
def test_a_resume_with_max_steps_0_lifts_the_limit_and_a_refusal_names_the_limit_that_binds(tmp_path):
    from distcore.config import TrainConfig

    run_dir = tmp_path / "long"  # as training leaves it: 2 epochs of 313 steps, stopped by max steps at 400
    (run_dir / "checkpoints").mkdir(parents=True)
    config = TrainConfig(devices=cpus(2), train_examples=20000, epochs=2, max_steps=400)
    (run_dir / "config.json").write_text(json.dumps(config.to_dict()))
    (run_dir / "checkpoints" / "ckpt-400.index").write_text("")
    result = cli("train", "--run-dir", str(run_dir), "--resume")  # no --max-steps: the saved limit stays
    assert result.returncode == 2 and result.stderr.strip().splitlines()[-1] == (
        "error: run long already finished at step 400 of 400: its max steps (400) end there; raise max steps, "
        "or set them to 0 (no limit), to train more."
    )
    # --max-steps 0 lifts it: 1 epoch (313 steps) is then the limit, and too short.
    result = cli("train", "--run-dir", str(run_dir), "--resume", "--max-steps", "0", "--epochs", "1")
    assert result.returncode == 2 and (
        "cannot resume long with epochs 1 and max steps 0: that makes 313 steps" in result.stderr
    ), result.stderr
    assert runs.resume_config(run_dir, {"max_steps": "0"}).total_steps() == 626  # as `--max-steps 0` gives it


@pytest.mark.slow
def test_keep_checkpoints_keeps_the_newest_and_a_resume_may_change_how_many(tmp_path):
    # Keeping every checkpoint, a long run with a checkpoint every few steps would fill the disk.
    run_dir = tmp_path / "kept"
    common = [
        "--run-dir",
        str(run_dir),
        "--replicas",
        "2",
        "--train-examples",
        "640",
        "--test-examples",
        "100",
        "--steps-per-loop",
        "5",
        "--checkpoint-every",
        "5",
    ]  # 10 steps an epoch
    assert cli("train", *common, "--epochs", "2", "--keep-checkpoints", "2").returncode == 0
    assert runs.list_checkpoints(run_dir) == ["ckpt-15", "ckpt-20"]
    result = cli("train", *common, "--epochs", "3", "--keep-checkpoints", "3", "--resume")
    assert result.returncode == 0, result.stderr[-2000:]
    # Without a terminal (captured here, as in a CI log) the epochs' results are still said.
    tested = [r for r in runs.read_metrics(run_dir) if "test_accuracy" in r and "epoch" in r][-1]
    assert (
        f"epoch 3: train loss {tested['train_loss']:.4f}, test accuracy {tested['test_accuracy']:.4f}"
        in result.stderr.splitlines()
    )
    assert runs.list_checkpoints(run_dir) == ["ckpt-20", "ckpt-25", "ckpt-30"]  # the first process's 15 too
    assert runs.saved_config(run_dir).keep_checkpoints == 3
    assert cli("evaluate", "--run-dir", str(run_dir), "--checkpoint", "ckpt-20").returncode == 0
    assert cli("train", *common, "--epochs", "4", "--keep-checkpoints", "-1", "--resume").returncode == 2


@pytest.mark.slow
def test_loss_check_shows_the_two_mistakes():
    run = cli("loss-check", "--replicas", "4", "--global-batch", "64", "--json", check=True)
    assert "Using MirroredStrategy eagerly" not in run.stderr  # the step runs as a tf.function
    result = json.loads(run.stdout)
    assert result["per_replica_examples"] == [16, 16, 16, 16]
    assert result["distributed"] == pytest.approx(result["single_device"], rel=1e-5)
    assert result["mistake_reduce_mean"] == pytest.approx(4 * result["single_device"], rel=1e-4)
    assert result["mistake_keras_mean"] == pytest.approx(result["single_device"] / 4, rel=1e-4)
    run = cli("loss-check", "--replicas", "3", "--global-batch", "6", "--examples", "4", check=True)
    assert "tutorial_fixed_g:" in run.stdout and "keras_default: fails (InvalidArgumentError" in run.stdout
    assert run.stdout.splitlines()[0] == "4 examples on 3 replicas: 2 + 2 + 0"  # as docs/cli.md says


def test_argument_errors_answer_in_json_too_and_choices_take_any_case(capsys):
    assert distcore_cli.main(["split", "--json", "--examples", "5"]) == 2
    out, err = capsys.readouterr()
    assert json.loads(out) == {"error": "the following arguments are required: --global-batch"}
    assert err.startswith("usage: python -m distcore split") and "error: the following arguments" in err
    assert distcore_cli.main(["train", "--json", "--run-dir", "x", "--model", "resnet"]) == 2
    error = json.loads(capsys.readouterr()[0])["error"]
    assert error == "model ('resnet') must be one of: cnn, mlp, or module:function (a Keras model factory)."
    args = distcore_cli.build_parser().parse_args(["train", "--run-dir", "x", "--model", "CNN", "--policy", "DATA"])
    assert args.policy == "data"  # as the configuration itself reads it
    assert TrainConfig(devices=("cpu:0",), model=args.model).model == "cnn"  # (module:function keeps its case)
    # No abbreviations: this would have been --replicas-per-worker 2 (4 GPUs on a GPU host).
    assert distcore_cli.main(["cluster", "--workers", "2", "--replicas", "2", "--run-dir", "x"]) == 2
    err = capsys.readouterr()[1]
    assert "unrecognized arguments: --replicas 2" in err
    assert err.startswith("usage: python -m distcore cluster") and "--replicas-per-worker" in err  # its own usage


def test_an_empty_run_dir_is_refused_before_anything_is_written(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # Path("") is the current folder: a run would land here
    for command in (["train"], ["cluster", "--workers", "2"], ["evaluate"]):
        assert distcore_cli.main([*command, "--run-dir", " "]) == 2
        assert "argument --run-dir: the run directory is empty" in capsys.readouterr()[1]
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_a_command_does_not_handle_ends_quietly(monkeypatch, capsys):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setitem(distcore_cli.COMMANDS, "devices", interrupted)
    assert distcore_cli.main(["devices"]) == 130
    assert capsys.readouterr()[1] == "stopped (Ctrl-C).\n"


def test_a_stop_by_another_signal_is_named_on_the_way_out(monkeypatch, capsys):
    # `split --workers` and `bench` name a SIGTERM or a SIGHUP, not "stopped (Ctrl-C)."
    def terminated(args):
        raise stopping.interruption(signal.SIGHUP)

    monkeypatch.setitem(distcore_cli.COMMANDS, "devices", terminated)
    assert distcore_cli.main(["devices"]) == 128 + signal.SIGHUP
    assert capsys.readouterr()[1] == "stopped (SIGHUP).\n"


def test_the_cluster_launcher_refuses_what_its_workers_would_refuse_before_starting_them(finished_run, tmp_path):
    before = run_files(finished_run)
    result = cli("cluster", "--workers", "2", "--run-dir", str(finished_run), "--json", timeout=60)
    assert result.returncode == 2
    assert json.loads(result.stdout)["error"] == (
        f"{finished_run} already holds a run: resume it (--resume; resume=True in Python), or pick another run "
        "directory."
    )
    assert run_files(finished_run) == before  # still finished: no worker ran, nothing marked failed
    result = cli(
        "cluster",
        "--workers",
        "2",
        "--run-dir",
        str(tmp_path / "new"),
        "--global-batch",
        "3",
        "--api",
        "function",
        timeout=60,
    )
    assert result.returncode == 2 and "worker" not in result.stderr and "resume" not in result.stderr
    assert result.stderr.strip().endswith(
        "the global batch (3) must divide evenly by the number of replicas (2); try a global batch of 2 or 4."
    )
    assert not (tmp_path / "new").exists()


def test_cluster_resume_checks_the_batch_against_the_clusters_replicas(finished_run, tmp_path):
    # A 4-replica run with the function API: 2 workers of one replica are 2 replicas, not 4 x 2.
    run_dir = tmp_path / "four"
    shutil.copytree(finished_run, run_dir)
    saved = runs.read_config(run_dir)
    (run_dir / "config.json").write_text(
        json.dumps(
            {
                **saved,
                "api": "function",
                "global_batch": 4,
                "train_examples": 40,  # still 10 steps: ckpt-10 ends it
                "devices": ["cpu:0", "cpu:1", "cpu:2", "cpu:3"],
            }
        )
    )
    result = cli("cluster", "--workers", "2", "--run-dir", str(run_dir), "--resume")
    assert result.returncode == 2 and "already finished at step 10" in result.stderr, result.stderr  # the next check
    # A bare worker of such a cluster makes the same check before it connects.
    env = {**os.environ, "TF_CONFIG": cluster.local_tf_configs(2)[0]}
    worker = subprocess.run(
        [sys.executable, "-m", "distcore", "train", "--multi-worker", "--resume", "--run-dir", str(run_dir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert worker.returncode == 2 and "already finished at step 10" in worker.stderr, worker.stderr


def test_a_clusters_run_resumes_in_one_process_and_evaluate_says_what_it_restored(finished_run, tmp_path):
    run_dir = tmp_path / "was-a-cluster"
    shutil.copytree(finished_run, run_dir)
    saved = runs.read_config(run_dir)
    (run_dir / "config.json").write_text(json.dumps({**saved, "workers": 2, "devices": ["cpu:0"]}))
    result = cli("train", "--run-dir", str(run_dir), "--resume", "--epochs", "2")
    assert result.returncode == 0, result.stderr
    assert runs.read_status(run_dir)["state"] == "finished" and runs.read_config(run_dir)["workers"] == 1
    assert runs.read_config(run_dir)["devices"] == ["cpu:0", "cpu:1"]  # 2 workers' replicas, kept
    assert runs.list_checkpoints(run_dir) == ["ckpt-10", "ckpt-20"]

    newest = next((run_dir / "checkpoints").glob("ckpt-20.data-*"))
    newest.write_bytes(newest.read_bytes()[:1000])  # damaged: evaluate falls back, and the text says so
    out = cli(
        "evaluate", "--run-dir", str(run_dir), "--details", "--data-dir", str(data.DEBIAN_DIR), check=True
    ).stdout.splitlines()
    logged = [r for r in runs.read_metrics(run_dir) if r.get("checkpoint") == "ckpt-10"][0]["test_accuracy"]
    assert out[0].startswith("ckpt-10 (step 10) on cpu:0: accuracy ")
    # Tested on 2 replicas (32 each), evaluated on 1 (64): a prediction whose top two logits tie to within
    # float32 rounding may go either way, one of the 200 (+0.5 for the quotients and the 4 digits shown).
    assert float(out[0].split(" accuracy ")[1].split(",")[0]) == pytest.approx(logged, abs=1.5 / 200)
    assert out[1].startswith("note: restored ckpt-10, the newest intact checkpoint; skipped ckpt-20")
    matrix = out[out.index("confusion matrix (rows: true class, columns: predicted class 0-9)") + 1 :][:10]
    assert sum(int(n) for row in matrix for n in row.split()[-10:]) == 200  # every test image once
    assert len([line for line in out if line.startswith("#")]) == 16


@pytest.mark.slow
def test_the_planner_refuses_drop_remainder_given_as_text():
    # {"drop_remainder": "false"} is refused, not planned with drop_remainder on (bool("false") is True).
    requests = [
        {"examples": 6, "global_batch": 4, "replicas": 2, "drop_remainder": "false"},
        {"examples": 6, "global_batch": 4, "replicas": 2, "drop_remainder": False},
    ]
    run = subprocess.run(
        [sys.executable, "-m", "distcore", "planner"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        input="".join(json.dumps(r) + "\n" for r in requests),
        timeout=300,
        check=True,
    )
    ready, refused, planned = [json.loads(line) for line in run.stdout.splitlines()]
    assert refused == {"error": "drop_remainder ('false') must be true or false (a boolean, not text or a number)."}
    assert planned["drop_remainder"] is False and planned["steps"][-1] == [[4], [5]]


@pytest.mark.slow
def test_a_resume_that_cannot_write_its_logs_fails_with_exit_2_and_says_so_in_its_status(tmp_path):
    # A message, exit 2 and a "failed" status, not a CreateSummaryFileWriter traceback, exit 1, and
    # status.json left "starting" with a dead pid.
    from distcore.config import TrainConfig
    from distcore.controller import Controller

    run_dir = tmp_path / "r"
    config = TrainConfig(devices=cpus(2), epochs=1, train_examples=640, test_examples=200, max_steps=2)
    Controller(config, run_dir).run()
    shutil.rmtree(run_dir / "logs")
    (run_dir / "logs").write_text("a file where TensorBoard's folder goes")
    result = cli("train", "--run-dir", str(run_dir), "--resume", "--max-steps", "4", "--json", timeout=120)
    message = f"cannot write TensorBoard logs in {run_dir / 'logs'}: Not a directory."
    assert result.returncode == 2 and json.loads(result.stdout.splitlines()[-1]) == {"error": message}
    assert "Traceback" not in result.stderr
    status = runs.read_status(run_dir)
    assert (status["state"], status["message"]) == ("failed", message)


def test_help_states_each_commands_default_device_set():
    # Each command's help says how many replicas it uses when given none.
    assert "logical CPUs; default 2)" in " ".join(cli("loss-check", "--help").stdout.split())
    evaluate = " ".join(cli("evaluate", "--help").stdout.split())
    assert "logical CPUs; default 1)" in evaluate and "--json print one JSON object" in evaluate


@pytest.mark.slow
def test_a_resume_says_when_it_reads_the_data_from_elsewhere_than_the_runs_folder(tmp_path):
    # The run's data folder is gone (a run copied from another machine): the resume reads the
    # data from the usual places, and says so on stderr, not only in the run's log.
    from distcore import data

    theirs, run_dir = tmp_path / "their-data", tmp_path / "r"
    theirs.mkdir()
    for name in data.FILES.values():
        (theirs / name).symlink_to(data.locate(download=False) / name)
    cli(
        "train",
        "--run-dir",
        str(run_dir),
        "--data-dir",
        str(theirs),
        "--train-examples",
        "640",
        "--test-examples",
        "200",
        "--max-steps",
        "2",
        check=True,
    )
    shutil.rmtree(theirs)
    result = cli("train", "--run-dir", str(run_dir), "--resume", "--max-steps", "4", check=True)
    note = f"note: the run's data folder {theirs} (its data_dir in {run_dir / 'config.json'}) lacks "
    assert note in result.stderr
    assert result.stdout.strip().endswith(f"finished at step 4 of 4; run directory: {run_dir}")
    result = cli("cluster", "--workers", "2", "--run-dir", str(run_dir), "--resume", "--max-steps", "6", check=True)
    assert result.stderr.count(note) == 1 and "2 workers finished" in result.stdout  # (once, by the launcher)


@pytest.mark.slow
def test_a_run_path_the_output_cannot_spell_does_not_fail_a_finished_run(tmp_path):
    # With PYTHONIOENCODING=ascii a finished run prints its last line, not crash on it (exit 1).
    run_dir = tmp_path / "é"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "distcore",
            "train",
            "--run-dir",
            str(run_dir),
            "--replicas",
            "1",
            "--train-examples",
            "128",
            "--test-examples",
            "64",
            "--max-steps",
            "1",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONIOENCODING": "ascii", "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    escaped = str(run_dir).replace("é", "\\xe9")
    assert result.stdout.splitlines()[-1] == f"finished at step 1 of 1; run directory: {escaped}"


@pytest.mark.slow
def test_a_stop_is_answered_while_the_loop_of_steps_still_runs(tmp_path):
    # Python runs a signal handler only once TensorFlow's call returns, yet a Ctrl-C during a loop
    # of 900 steps is answered at once, and so is a second one.
    run_dir = tmp_path / "run"
    with open(tmp_path / "out", "w") as out:  # (a pipe left unread would fill with the loop's 899 records)
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "distcore",
                "train",
                "--run-dir",
                str(run_dir),
                "--replicas",
                "1",
                "--epochs",
                "1",
                "--train-examples",
                "60000",
                "--steps-per-loop",
                "900",
                "--checkpoint-every",
                "0",
                "--test-examples",
                "100",
            ],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        )
    try:
        deadline = time.monotonic() + 120
        while (runs.read_status(run_dir) or {}).get("step") != 1:  # the first loop is one step; the next, 899
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        time.sleep(0.5)  # inside TensorFlow's call by now (a request before it stops at step 1)
        proc.send_signal(signal.SIGTERM)
        for line in proc.stderr:
            if "stopping at the end of this loop of steps" in line:
                break
        assert runs.last_logged_step(run_dir) == 1  # said while the loop of 899 steps still ran
        time.sleep(1)
        proc.send_signal(signal.SIGINT)
        rest = proc.stderr.read()
        assert "already stopping: the loop of steps in progress ends first" in rest, rest[-2000:]
        assert proc.wait(timeout=300) == 128 + signal.SIGTERM  # the first request's signal
    finally:
        if proc.poll() is None:
            proc.kill()
    assert runs.read_status(run_dir)["state"] == "stopped" and runs.read_status(run_dir)["step"] == 900


def test_details_name_the_classes_of_the_runs_own_data(capsys):
    result = {"confusion": [[2, 0, 1], [0, 3, 0], [0, 0, 4]], "samples": [{"index": 7, "label": 0, "predicted": 2}]}
    distcore_cli.print_details(result, "/data/three.npz")
    out = capsys.readouterr().out.splitlines()
    assert "confusion matrix (rows: true class, columns: predicted class 0-2)" in out
    assert "0            0     2     0     1" in out and "#7   0 -> 2  WRONG" in out
    distcore_cli.print_details({**result, "confusion": [[1] * 10] * 10}, "fashion-mnist")
    out = capsys.readouterr().out
    assert "predicted class 0-9" in out and "T-shirt/top -> Pullover  WRONG" in out
