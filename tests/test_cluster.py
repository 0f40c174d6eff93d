"""MultiWorkerMirroredStrategy with real worker processes on loopback ports."""

import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time

import pytest

from conftest import ROOT, wait_for
from distcore import cluster, devices, runs, stopping
from distcore.config import DistcoreError


def cli(*args, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "distcore", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def worker_split(policy, files, examples=12, batch=4, api="dataset", drop=False):
    result = cli(
        "split",
        "--workers",
        "2",
        "--files",
        str(files),
        "--examples",
        str(examples),
        "--global-batch",
        str(batch),
        "--policy",
        policy,
        "--api",
        api,
        "--json",
        *(["--drop-remainder"] if drop else []),
    )
    return result, json.loads(result.stdout.splitlines()[-1])


@pytest.mark.parametrize(
    "text,message",
    [
        (None, "needs the TF_CONFIG"),
        ("{", "not valid JSON"),
        ('{"cluster": {}}', "must hold"),
        ('{"cluster": {"ps": ["a:1"]}, "task": {"type": "ps", "index": 0}}', "must list workers"),
        ('{"cluster": {"worker": ["a:1", "a:1"]}, "task": {"type": "worker", "index": 0}}', "distinct"),
        ('{"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 2}}', "does not name a member"),
        (
            '{"cluster": {"worker": ["a:1", "b:notaport"]}, "task": {"type": "worker", "index": 0}}',
            "address 'b:notaport' has no valid port \\('notaport'\\): write host:port with a port from 1 to 65535",
        ),
        ('{"cluster": {"worker": ["a:1", "b:70000"]}, "task": {"type": "worker", "index": 0}}', "no valid port"),
        (
            '{"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": "1"}}',
            "task index '1' must be a whole number \\(0 for the first worker\\), written without quotes",
        ),
        (
            '{"cluster": {"worker": "a:1,b:2"}, "task": {"type": "worker", "index": 0}}',
            'cluster.worker must be a JSON list of "host:port" strings, e.g. .*; got "a:1,b:2"',
        ),
        ('{"cluster": {"worker": 5}, "task": {"type": "worker", "index": 0}}', "cluster.worker must be a JSON list"),
        (
            '{"cluster": {"worker": {"a": 1}}, "task": {"type": "worker", "index": 0}}',
            "cluster.worker must be a JSON list",
        ),
        (
            '{"cluster": {"chief": "a:1", "worker": ["b:2"]}, "task": {"type": "worker", "index": 0}}',
            "cluster.chief must be a JSON list",
        ),
    ],
)
def test_malformed_tf_config_is_refused_clearly(text, message):
    with pytest.raises(DistcoreError, match=message):
        cluster.parse_tf_config(text)


def test_tf_config_places_this_process():
    text = '{"cluster": {"chief": ["h0:1"], "worker": ["h1:1", "h2:1"]}, "task": {"type": "worker", "index": 1}}'
    task = cluster.parse_tf_config(text)
    assert task.workers == 3 and task.index == 2 and not task.is_chief


def codes_of(fields):
    return [cluster.code(v) for v in fields.values()]


def test_workers_flags_are_compared_field_by_field():
    from distcore.config import TrainConfig

    chief = cluster.agreement(TrainConfig(devices=("cpu:0",), workers=2, data_dir="/a"), resume=False)
    other = cluster.agreement(
        TrainConfig(devices=("cpu:0",), workers=2, data_dir="/b", global_batch=32, learning_rate=0.01, model="mlp"),
        resume=True,
    )
    assert cluster.disagreement(chief, [codes_of(chief), codes_of(chief)]) is None  # data_dir is per host
    message = cluster.disagreement(other, [codes_of(chief), codes_of(other)])
    assert message.startswith(
        "worker 1's flags differ from worker 0's: --model mlp (worker 0: cnn), "
        "--learning-rate 0.01 (worker 0: 0.001), --global-batch 32 (worker 0: 64), "
        "--resume given (worker 0: not given). Start every worker with the same flags"
    )
    # Two replicas per worker: rows come worker by worker.
    assert "worker 1's" in cluster.disagreement(chief, [codes_of(chief)] * 2 + [codes_of(other)] * 2, 2)


def test_free_ports_differ():
    ports = cluster.free_ports(4)
    assert len(set(ports)) == 4 and all(1024 <= p < 65536 for p in ports)


# 12 ids in 2 files ([0..5], [6..11]), 2 workers of 1 replica each, global batch 4: the
# distributed-input guide's example, which its tables match, FILE's [4] and [5] too. A
# pipeline that ends at batch() (split --no-map) gives FILE full pieces instead: [4, 5].
EXPECTED = {
    "data": [[[[0, 1]], [[4, 5]], [[8, 9]]], [[[2, 3]], [[6, 7]], [[10, 11]]]],
    "off": [[[[0, 1]], [[2, 3]], [[4, 5]], [[6, 7]], [[8, 9]], [[10, 11]]]] * 2,
    "file": [[[[0, 1]], [[2, 3]], [[4]], [[5]]], [[[6, 7]], [[8, 9]], [[10]], [[11]]]],
}
EXPECTED["auto"] = EXPECTED["file"]  # with files to shard, AUTO shards by file


@pytest.mark.parametrize("policy", ["data", "off", "file", "auto"])
@pytest.mark.slow
def test_shard_policies_across_two_workers(policy):
    result, out = worker_split(policy, files=2)
    assert result.returncode == 0, result.stderr[-2000:]
    assert [w["steps"] for w in out["workers"]] == EXPECTED[policy]
    assert [w["worker"] for w in out["workers"]] == [0, 1]
    overlap = any("more than one worker" in n for n in out["notes"])
    assert overlap == (policy == "off")


@pytest.mark.parametrize(
    "send, said, code",
    [
        (lambda pid: os.killpg(pid, signal.SIGINT), "Ctrl-C", 130),
        (lambda pid: os.kill(pid, signal.SIGTERM), "SIGTERM", 143),
    ],
)
@pytest.mark.slow
def test_ctrl_c_stops_a_split_across_workers_as_it_stops_a_split(tmp_path, send, said, code):
    # A stop ends the split as the stop it is (130 or 143, named), not "error: worker 0 exited with
    # status 130; ... Its log ends: stopped (Ctrl-C)." and exit 2; a SIGTERM is not called Ctrl-C.
    proc = subprocess.Popen(
        [sys.executable, "-m", "distcore", "split", "--workers", "2", "--examples", "12", "--global-batch", "4"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert wait_for(
        lambda: len(subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()) == 2,
        timeout=60,
    )
    time.sleep(1)  # the workers are importing TensorFlow
    send(proc.pid)
    returned, stderr = finish(proc, timeout=60)
    assert (returned, stderr.splitlines()[-1]) == (code, f"stopped ({said})."), stderr[-2000:]
    assert "error:" not in stderr


@pytest.mark.slow
def test_auto_on_an_in_memory_dataset_falls_back_to_data():
    result, out = worker_split("auto", files=0)
    assert [w["steps"] for w in out["workers"]] == EXPECTED["data"]
    assert any("fell back to DATA" in n for n in out["notes"])


@pytest.mark.parametrize("policy", ["file", "auto"])
@pytest.mark.slow
def test_file_policy_with_fewer_files_than_workers_shows_tensorflows_error(policy):
    result, out = worker_split(policy, files=1)  # AUTO too: with files it shards by FILE, no fallback
    assert result.returncode == 2
    assert "Could not apply FILE based sharding" in out["error"]  # TensorFlow's own words
    assert "cannot be split over 2 workers" in out["error"]  # and ours
    assert ("does not fall back to DATA" in out["error"]) == (policy == "auto")


def start_cluster(run_dir, *extra, tmp=None):
    """The launcher, with its temporary folders (and its workers') under TMP when given."""
    args = [
        "cluster",
        "--workers",
        "2",
        "--run-dir",
        str(run_dir),
        "--train-examples",
        "6400",
        "--test-examples",
        "500",
        "--epochs",
        "2",
        "--checkpoint-every",
        "20",
        "--steps-per-loop",
        "5",
        "--seed",
        "4",
        "--json",
        *extra,
    ]
    env = {**os.environ, "TMPDIR": str(tmp)} if tmp else None
    return subprocess.Popen(
        [sys.executable, "-m", "distcore", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )


def left_behind(tmp):
    """Files under TMP other than the worker logs a failed launch keeps for the post-mortem."""
    return sorted(
        str(p.relative_to(tmp))
        for p in tmp.rglob("*")
        if p.is_file() and not (p.parent.name.startswith("distcore-cluster-") and p.name.startswith("worker-"))
    )


def worker_pid(launcher_pid, index):
    for pid in subprocess.run(["pgrep", "-P", str(launcher_pid)], capture_output=True, text=True).stdout.split():
        if f'"index": {index}'.encode() in open(f"/proc/{pid}/environ", "rb").read():
            return int(pid)
    raise AssertionError("worker not found")


@pytest.mark.slow
def test_file_and_off_train_across_workers_only_with_the_function_api(tmp_path):
    refused = cli("cluster", "--workers", "2", "--run-dir", str(tmp_path / "off"), "--policy", "off", timeout=60)
    assert refused.returncode == 2 and "shard policy OFF cannot train across 2 workers" in refused.stderr
    assert not (tmp_path / "off").exists()
    # The function API shards in its own input function; the in-memory test set is not FILE-sharded.
    # 1983 examples: shards of 992 and 991, and drop_remainder still means 30 whole global batches
    # of 64 (worker 0's shard must not hold a 31st batch of its own, trained when a chunk ends past 30).
    done = cli(
        "cluster",
        "--workers",
        "2",
        "--run-dir",
        str(tmp_path / "fn"),
        "--policy",
        "file",
        "--api",
        "function",
        "--drop-remainder",
        "--train-examples",
        "1983",
        "--test-examples",
        "300",
        "--steps-per-loop",
        "7",
        "--json",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert runs.read_status(tmp_path / "fn")["state"] == "finished"
    steps = [r for r in runs.read_metrics(tmp_path / "fn") if "loss" in r]
    assert [r["step"] for r in steps] == list(range(1, 31)) and {r["examples"] for r in steps} == {64}


@pytest.mark.slow
def test_function_api_drop_remainder_across_workers_drops_the_partial_global_batch():
    result, out = worker_split("auto", files=0, examples=7, api="function", drop=True)
    assert [w["steps"] for w in out["workers"]] == [[[[0, 2]]], [[[1, 3]]]]  # not [4, 6] against []
    assert any("left out 3 of the 7" in n for n in out["notes"])


@pytest.mark.slow
def test_a_killed_worker_ends_the_job_clearly_and_resume_finishes(tmp_path):
    run_dir, tmp = tmp_path / "run", tmp_path / "tmp"
    tmp.mkdir()
    proc = start_cluster(run_dir, tmp=tmp)
    losses = []
    for line in proc.stdout:
        record = json.loads(line)
        if "loss" in record:
            losses.append(record["loss"])
        if record.get("step", 0) >= 45 and "loss" in record:
            break
    killed_at = time.monotonic()
    os.kill(worker_pid(proc.pid, 1), signal.SIGKILL)
    code, stderr = finish(proc, timeout=60)
    assert code == 2
    assert time.monotonic() - killed_at < cluster.FAILURE_BOUND_SECONDS
    assert "worker 1 was killed by SIGKILL" in stderr and "--resume" in stderr
    status = runs.read_status(run_dir)
    assert status["state"] == "failed" and "worker 1" in status["message"]
    assert "eta_seconds" not in status and "examples_per_sec" not in status  # the chief's, while it ran
    assert runs.list_checkpoints(run_dir)[:2] == ["ckpt-20", "ckpt-40"]
    assert sum(losses[-10:]) / 10 < sum(losses[:5]) / 5  # the cluster was learning
    assert runs.read_config(run_dir)["intra_op_threads"] == devices.intra_op_threads(2)  # workers share the host
    assert left_behind(tmp) == []  # the killed worker's own checkpoints, metrics and logs too

    proc = start_cluster(run_dir, "--resume")
    records = [json.loads(line) for line in proc.stdout]
    assert proc.wait(timeout=300) == 0, proc.stderr.read()[-2000:]
    assert records[0]["event"] == "resume" and records[0]["step"] >= 40
    assert runs.read_status(run_dir)["state"] == "finished" and runs.read_status(run_dir)["step"] == 200
    steps = [r["step"] for r in runs.read_metrics(run_dir) if "loss" in r]
    assert steps == list(range(1, 201))  # every step once: the lost steps' records were rolled back
    final = [r for r in runs.read_metrics(run_dir) if r.get("checkpoint") == "ckpt-200"][0]
    evaluated = json.loads(cli("evaluate", "--run-dir", str(run_dir), "--no-strategy", "--json").stdout)
    # Tested on 2 workers (32 each), evaluated with no strategy (64): a prediction whose top two logits tie
    # to within float32 rounding may go either way, one of the 500 (+0.5 for the quotients).
    assert evaluated["accuracy"] == pytest.approx(final["test_accuracy"], abs=1.5 / 500)
    assert final["test_accuracy"] > 0.7


def finish(proc, timeout):
    """A launcher's exit status and stderr, once it ends. Reading its stdout to the end had no
    bound: a launcher that hung (once, both workers idle at step 10 after a Ctrl-C) held the
    suite for good. One still running after `timeout` is killed with its workers, and fails."""
    try:
        _, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, stderr = proc.communicate()
        pytest.fail(f"the launcher still ran {timeout} s later; its stderr ends: {stderr[-2000:]}")
    return proc.returncode, stderr


def wait_for_step(proc, step):
    for line in proc.stdout:
        record = json.loads(line)
        if "loss" in record and record["step"] >= step:
            return


@pytest.mark.slow
def test_ctrl_c_stops_every_worker_at_one_step(tmp_path):
    run_dir, tmp = tmp_path / "run", tmp_path / "tmp"
    tmp.mkdir()
    proc = start_cluster(run_dir, tmp=tmp)
    wait_for_step(proc, 10)
    (scratch,) = tmp.glob("distcore-workers-*")  # names its workers, for launcher_scratch
    assert sorted(p.name for p in scratch.glob("*.pid")) == sorted(
        f"worker-{worker_pid(proc.pid, i)}.pid" for i in (0, 1)
    )
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C on a terminal does: the whole process group
    code, stderr = finish(proc, timeout=120)
    assert code == 130, stderr[-2000:]  # as the shell reports a Ctrl-C (not 0, on which a script goes on)
    assert "passing the stop on to the 2 workers" in stderr
    status = runs.read_status(run_dir)
    assert status["state"] == "stopped" and 10 <= status["step"] < 200
    assert runs.list_checkpoints(run_dir)[-1] == f"ckpt-{status['step']}"
    assert max(r["step"] for r in runs.read_metrics(run_dir) if "loss" in r) == status["step"]
    assert left_behind(tmp) == []


@pytest.mark.slow
def test_stops_that_come_after_the_run_finished_leave_it_finished(tmp_path):
    # A SIGTERM (the app's Stop) 0.5-2 s after "finished" does not kill worker 0 while it leaves,
    # and the finished run stays finished.
    run_dir = tmp_path / "run"
    proc = start_cluster(run_dir, "--train-examples", "1280", "--epochs", "1")
    for line in proc.stdout:
        if json.loads(line).get("event") == "finished":
            break
    while proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)  # the launcher and its workers, again and again
        time.sleep(0.05)
    code, stderr = finish(proc, timeout=60)
    assert code == 0, stderr[-2000:]
    assert runs.read_status(run_dir)["state"] == "finished"
    assert [r["event"] for r in runs.read_metrics(run_dir) if "event" in r][-1] == "finished"


@pytest.mark.slow
def test_a_stop_reaching_only_the_chief_during_start_up_stops_both(tmp_path):
    # The chief must not leave alone before training: worker 1 would wait for it forever.
    run_dir = tmp_path / "run"
    proc = start_cluster(run_dir)
    deadline = time.monotonic() + 120
    while (runs.read_status(run_dir) or {}).get("state") != "starting":  # its stop handler is in place
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    os.kill(worker_pid(proc.pid, 0), signal.SIGTERM)
    try:
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # the launcher and its workers
    assert proc.returncode == 0, proc.stderr.read()[-2000:]
    status = runs.read_status(run_dir)
    assert (status["state"], status["step"]) == ("stopped", 0)
    assert [r["event"] for r in runs.read_metrics(run_dir) if "event" in r] == ["start", "stopped"]


@pytest.mark.slow
def test_a_stop_passed_on_before_the_workers_handlers_are_in_place_stops_them_at_step_0(tmp_path):
    # Stop a few seconds after Start, passed on to a worker still starting Python (before its
    # stop handler), stops it at step 0, not "worker 0 was killed by SIGTERM" and the run "died".
    run_dir = tmp_path / "run"
    run_dir.mkdir()  # as the app makes it
    proc = start_cluster(run_dir)
    deadline = time.monotonic() + 60
    while (
        len(
            subprocess.run(
                ["pgrep", "-P", str(proc.pid), "-f", "distcore train"], capture_output=True, text=True
            ).stdout.split()
        )
        < 2
    ):  # both workers started, neither ready yet
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    try:
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + signal.SIGTERM, stderr[-2000:]
    status = runs.read_status(run_dir)
    assert (status["state"], status["step"]) == ("stopped", 0)
    assert [r["event"] for r in runs.read_metrics(run_dir) if "event" in r] == ["start", "stopped"]


# Workers started by hand, one per host, as in docs/clusters.md's multi-host recipe (no launcher).
BARE = [
    "train",
    "--multi-worker",
    "--train-examples",
    "640",
    "--test-examples",
    "100",
    "--max-steps",
    "10",
    "--steps-per-loop",
    "5",
]


def start_bare_worker(tf_config, run_dir, *extra, tmp=None):
    env = {k: v for k, v in os.environ.items() if k != stopping.LAUNCHED_ENV}  # not one of the launcher's
    env["TF_CONFIG"] = tf_config
    if tmp is not None:
        env["TMPDIR"] = str(tmp)
    return subprocess.Popen(
        [sys.executable, "-m", "distcore", *BARE, "--run-dir", str(run_dir), *extra],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )


def wait_all(procs, timeout=180) -> list[int]:
    """Every process's exit status; any still running after `timeout` is killed."""
    try:
        return [p.wait(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()


def connect_watchers(pid):
    """The watcher processes of a worker waiting for its peers (StopFlag.while_connecting)."""
    found = subprocess.run(["pgrep", "-f", f"distcore.stopping [0-9]+ {pid} "], capture_output=True, text=True)
    return found.stdout.split()


def wait_until_waiting_for_peers(proc, timeout=120):
    deadline = time.monotonic() + timeout
    while not connect_watchers(proc.pid):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()[-2000:]
        time.sleep(0.1)


@pytest.mark.slow
def test_a_bare_worker_waiting_for_a_peer_that_never_comes_leaves_when_asked_twice(tmp_path):
    # TensorFlow holds the GIL in its start-up barrier: without the watcher, no Ctrl-C gets through.
    run_dir = tmp_path / "run"
    config = cluster.local_tf_configs(2)[0]
    alone = start_bare_worker(config, run_dir)
    try:
        wait_until_waiting_for_peers(alone)
        alone.send_signal(signal.SIGINT)
        time.sleep(1.5)
        assert alone.poll() is None  # a first request waits for the peers: every worker stops at step 0
        alone.send_signal(signal.SIGINT)
        assert alone.wait(timeout=20) == -signal.SIGKILL
    finally:
        if alone.poll() is None:
            alone.kill()
    stderr = alone.stderr.read()
    assert "ask again to leave now" in stderr and "leaving now" in stderr
    peer = json.loads(config)["cluster"]["worker"][1]  # it says what it waits for, before the Ctrl-C
    said = f"worker 0: waiting for the other workers ({peer}) to connect. Ctrl-C stops every worker at step 0"
    assert stderr.index(said) < stderr.index("ask again to leave now")
    status = runs.read_status(run_dir)
    assert status["state"] == "stopped" and "waiting for the other workers" in status["message"]
    assert connect_watchers(alone.pid) == []


@pytest.mark.slow
def test_a_chief_killed_while_it_waits_is_started_again_by_the_same_command(tmp_path):
    # Its config.json stays (SIGKILL, or a second Ctrl-C), yet the same command starts the run,
    # not told the folder "already holds a run" nor needing every worker restarted with --resume.
    run_dir, configs = tmp_path / "run", cluster.local_tf_configs(2)
    dead = start_bare_worker(configs[0], run_dir)
    wait_until_waiting_for_peers(dead)
    assert (run_dir / "config.json").is_file()
    with pytest.raises(DistcoreError, match="already holds a run"):
        runs.check_new(run_dir)  # not while it waits: it holds the run
    dead.kill()
    dead.wait()
    procs = [start_bare_worker(configs[1], run_dir), start_bare_worker(configs[0], run_dir)]
    assert wait_all(procs) == [0, 0], [p.stderr.read()[-2000:] for p in procs]
    assert runs.read_status(run_dir)["state"] == "finished"


@pytest.mark.slow
def test_a_bare_worker_resuming_that_leaves_while_it_waits_leaves_the_run_as_it_was(tmp_path):
    # As a resume interrupted while it sets up: not "stopped before training began" with the new
    # total beside a config.json of the old one.
    run_dir = tmp_path / "run"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "distcore",
            "train",
            "--run-dir",
            str(run_dir),
            "--train-examples",
            "640",
            "--test-examples",
            "100",
            "--max-steps",
            "4",
            "--steps-per-loop",
            "2",
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=300,
    )
    before = {name: (run_dir / name).read_text() for name in ("config.json", "status.json")}
    alone = start_bare_worker(cluster.local_tf_configs(2)[0], run_dir, "--resume")
    try:
        wait_until_waiting_for_peers(alone)
        assert runs.read_status(run_dir)["state"] == "starting"
        alone.send_signal(signal.SIGINT)
        time.sleep(1.5)
        alone.send_signal(signal.SIGINT)
        assert alone.wait(timeout=20) == -signal.SIGKILL
    finally:
        if alone.poll() is None:
            alone.kill()
    assert {name: (run_dir / name).read_text() for name in before} == before


def test_workers_of_the_launcher_do_not_announce_their_wait(monkeypatch, capfd):
    monkeypatch.setenv(stopping.LAUNCHED_ENV, "1")  # their stderr is a log the launcher quotes on failure
    with stopping.StopFlag(cluster=True).while_connecting(announce="worker 1: waiting"):
        pass
    assert "waiting" not in capfd.readouterr().err


def test_a_worker_still_waiting_for_its_peers_says_again_what_may_be_wrong(monkeypatch, capfd):
    # TensorFlow's start-up barrier has no end of its own: a worker given another worker list
    # than its peers' would wait, silent after its first line, for as long as it is left.
    monkeypatch.delenv(stopping.LAUNCHED_ENV, raising=False)
    monkeypatch.setattr(stopping, "REMIND_SECONDS", (1, 1))
    with stopping.StopFlag(cluster=True).while_connecting(announce="worker 1: waiting", remind="worker 1: still"):
        time.sleep(2.7)  # as TensorFlow's barrier: the watcher process speaks meanwhile
    err = capfd.readouterr().err
    assert (
        err.index("worker 1: waiting")
        < err.index("worker 1: still (waiting for 1 s)")
        < err.index("worker 1: still (waiting for 2 s)")
    )
    time.sleep(1.5)
    assert "still" not in capfd.readouterr().err  # the watcher left with the wait
    assert [stopping.waited(s) for s in (45, 60, 3599, 7500)] == ["45 s", "1 min", "59 min", "2 h 5 min"]


@pytest.mark.slow
def test_bare_workers_asked_once_while_connecting_stop_together_at_step_0(tmp_path):
    run_dir = tmp_path / "run"
    configs = cluster.local_tf_configs(2)
    chief = start_bare_worker(configs[0], run_dir)
    procs = [chief]
    try:
        wait_until_waiting_for_peers(chief)
        chief.send_signal(signal.SIGINT)
        procs.append(start_bare_worker(configs[1], run_dir))  # one shared run directory, as on shared storage
        codes = [p.wait(timeout=180) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert codes == [0, 0], [p.stderr.read()[-2000:] for p in procs]  # workers end alike (a TFJob's pods)
    assert "ask again to leave now" in chief.stderr.read()
    status = runs.read_status(run_dir)
    assert (status["state"], status["step"]) == ("stopped", 0)
    assert [connect_watchers(p.pid) for p in procs] == [[], []]


@pytest.mark.slow
def test_bare_workers_given_different_flags_stop_before_training_and_say_what_differs(tmp_path):
    # Before the check: --global-batch 64 against 32 "finished at step 63 of 32", and different
    # --steps-per-loop waited in mismatched all-reduces forever.
    run_dir, tmp = tmp_path / "run", tmp_path / "tmp"
    tmp.mkdir()
    configs = cluster.local_tf_configs(2)
    procs = [
        start_bare_worker(configs[0], run_dir, tmp=tmp),
        start_bare_worker(configs[1], run_dir, "--global-batch", "32", "--steps-per-loop", "3", tmp=tmp),
    ]
    codes = wait_all(procs)
    assert list(tmp.glob("distcore-worker-*")) == []  # worker 1's scratch folder is removed too
    stderr = [p.stderr.read() for p in procs]
    assert codes == [2, 2], stderr
    differ = (
        "worker 1's flags differ from worker 0's: --global-batch 32 (worker 0: 64), --steps-per-loop 3 (worker 0: 5)."
    )
    for index, text in enumerate(stderr):
        assert f"error: worker {index}: {differ} Start every worker with the same flags" in text
    status = runs.read_status(run_dir)
    assert status["state"] == "failed" and differ in status["message"] and status["step"] == 0
    assert [r for r in runs.read_metrics(run_dir) if "loss" in r] == []
    runs.check_new(run_dir)  # the same commands with the flags fixed start it: it held "a run" before


@pytest.mark.slow
def test_a_resume_by_bare_workers_given_different_flags_leaves_the_run_as_it_was(tmp_path):
    # A finished run stays finished, not "failed · 63 / 126" beside its config.json of 63 steps,
    # as every other refused resume leaves a run.
    run_dir = tmp_path / "run"
    subprocess.run(
        [sys.executable, "-m", "distcore", "train", *BARE[2:], "--run-dir", str(run_dir), "--max-steps", "4"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=300,
    )
    before = {name: (run_dir / name).read_text() for name in ("config.json", "status.json")}
    configs = cluster.local_tf_configs(2)
    procs = [
        start_bare_worker(configs[0], run_dir, "--resume"),
        start_bare_worker(configs[1], run_dir, "--resume", "--max-steps", "8"),
    ]
    codes = wait_all(procs)
    assert codes == [2, 2] and "--max-steps 8 (worker 0: 10)" in procs[0].stderr.read()
    assert {name: (run_dir / name).read_text() for name in before} == before


@pytest.mark.slow
def test_a_bare_worker_refused_before_it_connects_says_its_peers_wait_for_it(tmp_path):
    # Its peers wait in TensorFlow's start-up barrier with no end: it says so, beside what is wrong.
    config = json.loads(cluster.local_tf_configs(2)[1])
    config["task"]["index"] = 2
    proc = start_bare_worker(json.dumps(config), tmp_path / "run")
    assert wait_all([proc], timeout=60) == [2]
    assert f"does not name a member of the cluster {config['cluster']}. {cluster.PEERS_WAIT}" in proc.stderr.read()


@pytest.mark.slow
def test_two_bare_workers_given_the_same_index_are_told_so(tmp_path):
    # The second is told of the shared task index, not only that its twin trains the run.
    run_dir = tmp_path / "run"
    config = cluster.local_tf_configs(2)[0]
    first = start_bare_worker(config, run_dir)
    assert wait_for(lambda: (run_dir / "status.json").is_file(), timeout=60)  # it holds the run
    second = start_bare_worker(config, run_dir)
    assert wait_all([second], timeout=120) == [2]
    first.kill()
    assert (
        f"is being trained by process {first.pid} right now: stop it, or wait until it ends, then resume. "
        "If that is another worker of this cluster, two workers have the same task index in TF_CONFIG: "
        f"give each its own, 0 to 1. {cluster.PEERS_WAIT}"
    ) in second.stderr.read()


@pytest.mark.slow
def test_a_bare_worker_whose_port_is_taken_fails_clearly_and_the_same_commands_then_start_the_run(tmp_path):
    # Exit 2 with a message and a "failed" status, not TensorFlow's traceback, exit 1 and "starting".
    run_dir = tmp_path / "run"
    configs = cluster.local_tf_configs(2)
    address = json.loads(configs[0])["cluster"]["worker"][0]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", int(address.split(":")[1])))
        taken.listen()
        chief = start_bare_worker(configs[0], run_dir)
        assert chief.wait(timeout=120) == 2
    stderr = chief.stderr.read()
    said = (
        f"cannot start this worker's server on {address} "
        "(UnknownError: Could not start gRPC server: is the port in use?)."
    )
    assert f"error: {said} {cluster.PEERS_WAIT}" in stderr and "Traceback" not in stderr
    status = runs.read_status(run_dir)
    assert status["state"] == "failed" and status["message"] == f"{said} {cluster.PEERS_WAIT}"
    # The port is free again: the same commands start the run (not "already holds a run", nor,
    # with --resume, flags that differ from the worker still waiting, started without).
    procs = [start_bare_worker(config, run_dir) for config in configs]
    codes = wait_all(procs)
    assert codes == [0, 0], [p.stderr.read()[-2000:] for p in procs]
    assert runs.read_status(run_dir)["state"] == "finished"


class Ended:
    """A worker process that has already ended with `returncode` (for cluster.watch)."""

    def __init__(self, returncode):
        self.returncode = returncode

    def poll(self):
        return self.returncode

    def wait(self, timeout=None):
        return self.returncode


def test_a_worker_killed_by_a_signal_is_blamed_over_one_that_exited_after_it(tmp_path):
    # Worker 1 is SIGKILLed; worker 0 then fails over its lost peer and leaves at once, so one
    # poll finds both. Worker 1 is blamed, not worker 0 ("exited with status 2").
    outcome = cluster.watch([Ended(2), Ended(-signal.SIGKILL)], tmp_path, None)
    assert outcome.failed == 1 and outcome.message.startswith("worker 1 was killed by SIGKILL")
    assert cluster.watch([Ended(0), Ended(2)], tmp_path, None).failed == 1


class Hung(Ended):
    """A worker that does not answer SIGTERM (stopped, or blocked in a collective) until killed."""

    def __init__(self):
        super().__init__(None)

    def terminate(self):
        pass

    def kill(self):
        self.returncode = -signal.SIGKILL


def test_a_worker_that_stopped_responding_is_named_beside_the_one_that_exited(tmp_path, monkeypatch):
    # Worker 1 stops (SIGSTOP); worker 0 finds it through TensorFlow's heartbeats and exits: the
    # launcher names worker 1 too, not worker 0 alone.
    (tmp_path / "worker-0.log").write_text(
        "E0000 base_collective_executor.cc:252] BaseCollectiveExecutor::StartAbort UNAVAILABLE: Error reported "
        "from /job:worker/task:1: The following tasks are unhealthy (stopped sending heartbeats):\n"
        "/job:worker/replica:0/task:1\nThe tasks have crashed.\nerror: worker 0: the cluster lost a peer\n"
    )
    monkeypatch.setattr(cluster, "GRACE_SECONDS", 0.1)
    outcome = cluster.watch([Ended(2), Hung()], tmp_path, None)
    assert outcome.message.startswith(
        "worker 1 stopped responding (TensorFlow's heartbeats found it unhealthy), "
        "so worker 0 exited with status 2; the other workers were stopped."
    )
    (tmp_path / "worker-0.log").write_text("error: worker 0: a reason of its own\n")
    assert cluster.watch([Ended(2), Hung()], tmp_path, None).message.startswith("worker 0 exited with status 2")


def tfjob_command(run_dir) -> str:
    """The TFJob pods' command (deploy/tfjob.yaml, a folded block), for this python and a short run."""
    folded = (ROOT / "deploy/tfjob.yaml").read_text().split("- >-\n", 1)[1].split("ports:", 1)[0]
    command = " ".join(line.strip() for line in folded.splitlines() if line.strip())
    for old, new in (
        ("/runs/fmnist-2workers", str(run_dir)),
        (".venv/bin/python", shlex.quote(sys.executable)),
        ("--global-batch 128 --epochs 5 --checkpoint-every 200", " ".join(BARE[2:])),
    ):
        assert old in command
        command = command.replace(old, new)
    return command


@pytest.mark.parametrize("chief_died_waiting", [False, True])
@pytest.mark.slow
def test_the_tfjob_pods_agree_on_resume_when_one_starts_late(tmp_path, chief_died_waiting):
    # Each pod chose --resume by config.json, which the chief writes before it waits for its
    # peers: a pod started later resumed alone, and both exited 2.
    run_dir, configs = tmp_path / "run", cluster.local_tf_configs(2)
    env = {k: v for k, v in os.environ.items() if k != stopping.LAUNCHED_ENV}

    def pod(index):
        return subprocess.Popen(
            ["sh", "-c", tfjob_command(run_dir)],
            cwd=ROOT,
            text=True,
            start_new_session=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**env, "TF_CONFIG": configs[index]},
        )

    def chief_waiting():
        chief = pod(0)
        wait_until_waiting_for_peers(chief)
        assert (run_dir / "config.json").is_file()
        return chief

    if chief_died_waiting:  # a node lost: its config.json stays, though nothing was trained
        dead = chief_waiting()
        os.killpg(dead.pid, signal.SIGKILL)
        dead.wait()
    procs = [chief_waiting()]
    procs.append(pod(1))  # started once the chief had written config.json
    assert wait_all(procs) == [0, 0], [p.stdout.read()[-500:] for p in procs]
    assert runs.read_status(run_dir)["state"] == "finished"


def stop_while_counting_gpus(*args):
    """`cluster ARGS`, stopped with SIGTERM while it counts GPUs; (the process, its child's pid)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "distcore", "cluster", "--workers", "2", *args],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not (child := subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    assert "stopped before training began: nothing to save." in proc.stderr.read()
    return proc, child[0]


@pytest.mark.slow
def test_a_resumed_cluster_stopped_before_launch_leaves_the_run_as_it_was(tmp_path):
    # Not "stopped 752/940" beside a config.json of 752 steps, after which a plain resume would say
    # "already finished at step 752 of 752" (as train --resume leaves it too).
    run_dir = tmp_path / "run"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "distcore",
            "train",
            "--run-dir",
            str(run_dir),
            "--train-examples",
            "640",
            "--test-examples",
            "100",
            "--max-steps",
            "2",
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=300,
    )
    before = {name: (run_dir / name).read_text() for name in ("config.json", "status.json")}
    stop_while_counting_gpus("--run-dir", str(run_dir), "--resume", "--max-steps", "4")
    assert {name: (run_dir / name).read_text() for name in before} == before


@pytest.mark.slow
def test_a_stop_while_the_launcher_counts_gpus_stops_it_cleanly(tmp_path):
    # SIGTERM there stops it as before training, not silently (exit 143) with the GPU-counting child left running.
    _, child = stop_while_counting_gpus("--run-dir", str(tmp_path / "run"))
    assert not os.path.exists(f"/proc/{child}")  # (the child was its GPU count: no worker has started)
    assert not (tmp_path / "run").exists()


def test_a_killed_launchers_scratch_folder_goes_once_its_workers_are_gone_too(tmp_path, monkeypatch):
    # A `cluster` launcher killed with SIGKILL does not leave its workers' folder in /tmp for good.
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    ).stdout.strip()  # a pid no longer alive
    orphaned, abandoned, own = (
        tmp_path / f"distcore-workers-{gone}-a",
        tmp_path / f"distcore-workers-{gone}-b",
        tmp_path / f"distcore-workers-{os.getpid()}-c",
    )
    orphaned.mkdir()  # its chief trains on: a chief makes no folder of its own in there
    (orphaned / f"worker-{gone}.pid").touch()
    (orphaned / f"worker-{os.getpid()}.pid").touch()
    abandoned.mkdir()
    (abandoned / f"worker-{gone}.pid").touch()
    own.mkdir()
    fresh = cluster.launcher_scratch()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([orphaned.name, own.name, os.path.basename(fresh)])
    assert os.path.basename(fresh).startswith(f"distcore-workers-{os.getpid()}-")
