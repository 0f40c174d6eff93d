"""Many users: a real `python app.py`, driven by concurrent gradio_client sessions.

- 8 clients ask 8 different splits at once and each gets exactly the ids of its own request;
- 8 clients press Start at once: exactly MAX_JOBS runs start, the others get the plain
  "already running ... allows N at a time" message, and per-session state (gr.State,
  the run picker) does not leak between sessions: a run is seen by name only;
- 50 start/stop cycles, MAX_JOBS at a time, leave the app's RSS and thread count back
  near where they started, with no zombie or orphaned training process;
- a port already in use ends `python app.py` with one plain line and a non-zero exit.

Every training start is a TensorFlow process (~5 CPU-seconds to import TensorFlow, set up
and stop), so the runs are tiny and stopped as soon as the stop is accepted; on 2 cores the
cycles are CPU-bound, so running more of them at once does not make them faster.
"""

import json
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from gradio_client import Client

from conftest import ROOT, wait_for
from distcore import jobs, runs

MAX_JOBS = 2  # the app's DISTCORE_MAX_JOBS: 8 clients are four times as many
CLIENTS = 8
CYCLES = 50
THREADS_TOLERANCE = 5  # threads: at most this many more than before the cycles
RSS_TOLERANCE_MIB = 60  # RSS: at most this much more than before the cycles (after warm-up)
REFUSED = f"allows {MAX_JOBS} at a time"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_status(pid) -> dict:
    """VmRSS (KiB) and Threads of a process, from /proc/PID/status."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "Threads"):
            out[key] = int(value.split()[0])
    return out


def cpu_seconds(pid) -> tuple[float, float]:
    """(the process's own CPU seconds, its reaped children's), from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick, (int(fields[13]) + int(fields[14])) / tick


def processes():
    """(pid, ppid, state, cmdline) of every process."""
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        yield int(d.name), int(fields[1]), fields[0], cmd


def leftovers(app_pid, runs_root):
    """Zombie children of the app, and any training process of this runs folder still alive."""
    bad = []
    for pid, ppid, state, cmd in processes():
        if ppid == app_pid and state == "Z":
            bad.append(f"zombie child {pid}: {cmd}")
        elif str(runs_root) in cmd and state != "Z":
            bad.append(f"live training process {pid} (parent {ppid}): {cmd}")
    return bad


def start_app(home: Path, log):
    """`python app.py` in a subprocess, serving: (its Popen, url, runs root)."""
    root = (home / "runs").resolve()
    root.mkdir()
    port = free_port()
    env = {
        **os.environ,
        "GRADIO_SERVER_PORT": str(port),
        "DISTCORE_RUNS_DIR": str(root),
        "DISTCORE_MAX_JOBS": str(MAX_JOBS),
        "GRADIO_ANALYTICS_ENABLED": "False",
    }
    env.pop("GRADIO_SERVER_NAME", None)
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "app.py")], cwd=home, env=env, stdout=log, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"

    def up():
        if proc.poll() is not None:
            return True
        try:
            urllib.request.urlopen(url, timeout=2)
            return True
        except OSError:
            return False

    if not wait_for(up, timeout=180, poll=0.25) or proc.poll() is not None:
        proc.kill()
        pytest.fail(f"the app did not start: {(home / 'app.log').read_text()[-2000:]}")
    return proc, url, root


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The app in a subprocess: (url, pid, runs root)."""
    home = tmp_path_factory.mktemp("many")
    log = open(home / "app.log", "wb")
    proc, url, root = start_app(home, log)
    yield url, proc.pid, root
    for run_dir in root.iterdir():  # a failed test may leave runs going: stop them
        pid = jobs.job_pid(run_dir)
        if pid:
            os.kill(pid, signal.SIGKILL)
    proc.terminate()
    proc.wait(timeout=60)
    log.close()


def client(url) -> Client:
    return Client(url, verbose=False)


def run_concurrently(fn, args_list):
    """fn(*args) in one thread each, released together; results (or exceptions) in order."""
    barrier = threading.Barrier(len(args_list))
    results = [None] * len(args_list)

    def target(i, args):
        try:
            barrier.wait(timeout=60)
            results[i] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - reported by the caller
            results[i] = e

    threads = [threading.Thread(target=target, args=(i, a)) for i, a in enumerate(args_list)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return results


def train_form(epochs=20, max_steps=0, replicas=2):
    """The Start training inputs after the run name (distcore.forms.TRAIN_FORM order): tiny runs."""
    return [replicas, [], 64, "auto", "dataset", "mlp", "adam", 0.001, epochs, max_steps, 8, 0, 0, 512, 100, False, 1]


# ---------------------------------------------------------------- the split visualiser


def parse_ids(label: str) -> list[int]:
    """'3 examples: 0,1,5–7' -> [0, 1, 5, 6, 7] (plots.format_ids, in the hover text)."""
    text = label.split(": ", 1)[1]
    if text == "empty":
        return []
    assert "…" not in text, label
    ids = []
    for part in text.split(","):
        a, _, b = part.partition("–")
        ids += list(range(int(a), int(b or a) + 1))
    return ids


# (toy dataset size N, global batch G, replicas R): a different answer for every client.
SPLITS = [(16, 4, 2), (18, 6, 3), (32, 8, 4), (20, 10, 5), (24, 12, 6), (21, 7, 7), (40, 8, 8), (26, 8, 2)]


def check_split(n, g, r, result):
    fig, summary, plan = result
    steps = math.ceil(n / g)
    assert f"**{n} examples → {steps} global batches of {g} on {r} replicas**" in summary, summary
    trace = json.loads(fig["plot"])["data"][0]
    cells = [[parse_ids(c) for c in row] for row in trace["customdata"]]
    assert [[sorted(ids) for ids in row] for row in plan["steps"]] == cells  # the JSON is the figure's plan
    assert len(cells) == steps and all(len(row) == r for row in cells), (n, g, r, cells)
    for s, row in enumerate(cells):
        if (s + 1) * g <= n:  # a full global batch: G/R consecutive ids per replica
            share = g // r
            assert row == [list(range(s * g + k * share, s * g + (k + 1) * share)) for k in range(r)]
        else:  # the partial last batch: its ids, in replica order
            assert sum(row, []) == list(range(s * g, n))


def test_a_device_count_sent_as_view_api_lists_it_is_taken(server):
    # view_api lists a Radio's choices as text, Literal['1', ..., '16']: "3" is taken, not refused
    # as "not in the list of choices", which only a script that guessed ints would get past.
    url, _, _ = server
    c = client(url)
    count = c.view_api(return_format="dict", print_info=False)["named_endpoints"]["/plan_split"]["parameters"][4]
    assert count["label"] == "Replicas (logical CPU devices)" and "'3'" in count["python_type"]["type"]
    for sent in ("3", 3):
        summary = c.predict("toy", 6, 60000, 6, sent, [], "auto", "dataset", False, 0, 1, api_name="/plan_split")[1]
        assert summary.startswith("**6 examples → 1 global batch of 6 on 3 replicas"), summary
    # Also once an event has updated the device choice: Gradio then rebuilds this session's
    # copy of the component from its arguments (a fix on the first instance alone is lost there).
    c.predict(1, api_name="/devices_in_use")
    summary = c.predict("toy", 6, 60000, 6, "3", [], "auto", "dataset", False, 0, 1, api_name="/plan_split")[1]
    assert summary.startswith("**6 examples → 1 global batch of 6 on 3 replicas"), summary


def test_eight_clients_each_get_their_own_split(server):
    url, _, _ = server
    assert len(SPLITS) == CLIENTS and len(set(SPLITS)) == CLIENTS
    clients = [client(url) for _ in range(CLIENTS)]

    def ask(c, n, g, r):
        answers = []
        for _ in range(2):  # twice, so the requests of different sessions interleave
            answers.append(c.predict("toy", n, 60000, g, r, [], "auto", "dataset", False, 0, 1, api_name="/plan_split"))
        return answers

    started = time.monotonic()
    results = run_concurrently(ask, [(c, *s) for c, s in zip(clients, SPLITS)])
    elapsed = time.monotonic() - started
    for (n, g, r), answers in zip(SPLITS, results):
        for answer in answers:
            check_split(n, g, r, answer)
    print(f"\n{CLIENTS} clients x 2 splits: {elapsed:.1f} s")


# ---------------------------------------------------------------- starting jobs


def full_view(result) -> bool:
    """poll_run redrew (a status string) rather than skipping (an update with no value)."""
    return isinstance(result[0], str)


def test_eight_clients_start_jobs_limit_holds_and_sessions_stay_apart(server):
    url, _, root = server
    clients = [client(url) for _ in range(CLIENTS)]
    names = [f"user{i}" for i in range(CLIENTS)]
    started = time.monotonic()
    answers = run_concurrently(
        lambda c, name: c.predict(name, *train_form(), api_name="/start_training")[:2], list(zip(clients, names))
    )
    start_seconds = time.monotonic() - started

    winners = [i for i, (msg, _) in enumerate(answers) if msg.startswith("Started")]
    losers = [i for i in range(CLIENTS) if i not in winners]
    assert len(winners) == MAX_JOBS, [a[0] for a in answers]
    for i in winners:
        msg, dropdown = answers[i]
        assert msg.startswith(f"Started **{names[i]}** (process "), msg
        assert not any(other in msg for other in names if other != names[i]), msg
        assert dropdown["value"] == names[i]
    for i in losers:
        msg, dropdown = answers[i]
        assert "dc-error" in msg and "training job(s) are already running" in msg and REFUSED in msg, msg
        assert "Started" not in msg and names[i] not in msg
        assert dropdown == {"__type__": "update"}  # gr.skip(): the run picker is untouched
        assert not (root / names[i]).exists()
    assert jobs.active_runs(root) == sorted(names[i] for i in winners)

    # Run names are shared by design (Refresh lists every run), and the run pickers take a name
    # their choices lack (after an app restart an open page's timer sends one): a name that is
    # no run is refused in place, by the app, not by a Gradio error.
    owner, other = clients[winners[0]], clients[losers[0]]
    run = names[winners[0]]
    refused = other.predict("no-such-run", api_name="/stop_training")[0]
    assert "dc-error" in refused and "no-such-run" in refused, refused

    # Each winner stops its own run; the limit frees up once the processes have exited.
    stops = run_concurrently(
        lambda c, name: c.predict(name, api_name="/stop_training")[0], [(clients[i], names[i]) for i in winners]
    )
    for i, msg in zip(winners, stops):
        assert msg.startswith(f"Stopping **{names[i]}**"), msg
    assert wait_for(lambda: not jobs.active_runs(root), timeout=180), jobs.active_runs(root)
    for i in winners:
        assert runs.read_status(root / names[i])["state"] == "stopped"

    # gr.State is per session (the runs have stopped, so nothing changes on disk now):
    # the owner's poll fills its state, so its next poll has nothing new ...
    assert full_view(owner.predict(run, api_name="/poll_run"))
    assert not full_view(owner.predict(run, api_name="/poll_run"))
    # ... while another session that opens the run by name starts from its own, empty state.
    first, _, _ = other.predict(None, api_name="/on_load")
    assert run in [value for _, value in first["choices"]]
    seen = other.predict(run, api_name="/poll_run")
    assert full_view(seen) and f"**{run}** · **stopped**" in seen[0]
    assert not full_view(other.predict(run, api_name="/poll_run"))
    assert not full_view(owner.predict(run, api_name="/poll_run"))
    # The run pickers' states, likewise: filled once per session (Train's, then Evaluate's, unchosen).
    assert all("choices" in update for update in owner.predict(None, None, None, api_name="/poll_lists")[:2])
    assert all("choices" not in update for update in owner.predict(None, None, None, api_name="/poll_lists"))
    assert all("choices" in update for update in client(url).predict(None, None, None, api_name="/poll_lists")[:2])
    # A tick can carry a checkpoint the picker's current choices lack (the previous run's): no error.
    stale = client(url).predict(None, "ckpt-999999", None, api_name="/poll_lists")
    assert "ckpt-999999" not in stale[2]["choices"]

    # A refused user can start now (the refusal is not sticky).
    i = losers[-1]
    msg, _, _ = clients[i].predict(names[i], *train_form(), api_name="/start_training")
    assert msg.startswith(f"Started **{names[i]}**"), msg
    assert clients[i].predict(names[i], api_name="/stop_training")[0].startswith(f"Stopping **{names[i]}**")
    assert wait_for(lambda: not jobs.active_runs(root), timeout=180), jobs.active_runs(root)
    print(
        f"\n{CLIENTS} concurrent starts answered in {start_seconds:.1f} s; "
        f"whole test {time.monotonic() - started:.1f} s"
    )


# ---------------------------------------------------------------- start/stop cycles


def test_a_started_job_counts_as_running_at_once(tmp_path, monkeypatch):
    """Popen returns before the kernel has filled /proc/PID/cmdline in; start_training must
    not return until the job counts as running, or a job-limit check right after it (another
    user's Start) misses it, and the run picker it returns lacks the new run."""
    real, looks = jobs.is_train_process, []

    def cmdline_not_there_yet(pid, run_dir):  # the window, made long enough to see
        looks.append(pid)
        return len(looks) > 3 and real(pid, run_dir)

    monkeypatch.setattr(jobs, "is_train_process", cmdline_not_there_yet)
    for i in range(10):
        looks.clear()
        name = f"quick{i}"
        pid = jobs.start_training(tmp_path, name, ["--max-steps", "1"])
        try:
            assert real(pid, tmp_path / name) and jobs.active_runs(tmp_path) == [name]
        finally:
            os.kill(pid, signal.SIGKILL)  # before it even imports TensorFlow
        assert wait_for(lambda: not real(pid, tmp_path / name), timeout=30)  # noqa: B023 (called in this iteration)
    assert wait_for(lambda: not leftovers(os.getpid(), tmp_path), timeout=30), leftovers(os.getpid(), tmp_path)


def start_stop_cycles(url, root, names):
    """MAX_JOBS sessions take the names in turn: start, stop once accepted, wait for the exit."""
    todo = list(names)
    lock = threading.Lock()
    timings = []

    def worker():
        c = client(url)
        while True:
            with lock:
                if not todo:
                    return
                name = todo.pop(0)
            t0 = time.monotonic()
            msg, dropdown, _ = c.predict(name, *train_form(), api_name="/start_training")
            assert msg.startswith(f"Started **{name}**"), msg  # at most MAX_JOBS - 1 others run
            assert dropdown["value"] == name, dropdown  # the new run is listed, and picked
            t1 = time.monotonic()
            msg = c.predict(name, api_name="/stop_training")[0]
            assert msg.startswith(f"Stopping **{name}**"), msg
            t2 = time.monotonic()
            stopped = wait_for(lambda: not jobs.is_active(root / name), timeout=180)  # noqa: B023 (called here)
            assert stopped, f"{name} did not stop"
            timings.append((t1 - t0, t2 - t1, time.monotonic() - t2))

    run_concurrently(worker, [()] * MAX_JOBS)
    return timings


def test_start_stop_cycles_leave_memory_threads_and_processes_as_they_were(server):
    url, app_pid, root = server
    if not any(root.iterdir()):  # run alone: warm the app up with one round first
        start_stop_cycles(url, root, [f"warm{i}" for i in range(MAX_JOBS)])
    assert wait_for(lambda: not leftovers(app_pid, root), timeout=30), leftovers(app_pid, root)
    before = proc_status(app_pid)
    cpu_before = cpu_seconds(app_pid)

    started = time.monotonic()
    names = [f"cycle{i:02d}" for i in range(CYCLES)]
    timings = start_stop_cycles(url, root, names)
    elapsed = time.monotonic() - started
    cpu = [b - a for a, b in zip(cpu_before, cpu_seconds(app_pid))]
    assert len(timings) == CYCLES
    for name in names:
        assert runs.read_status(root / name)["state"] == "stopped", name

    # No zombie children and no training process left (reparented orphans included).
    assert wait_for(lambda: not leftovers(app_pid, root), timeout=30), leftovers(app_pid, root)
    right_after = proc_status(app_pid)
    # Gradio's idle worker threads retire after ~10 s: give them that long, no more.
    settled = wait_for(
        lambda: proc_status(app_pid)["Threads"] <= before["Threads"] + THREADS_TOLERANCE, timeout=20, poll=0.5
    )
    after = proc_status(app_pid)
    mib = lambda kib: kib / 1024  # noqa: E731
    report = (
        f"{CYCLES} cycles, {MAX_JOBS} at a time: {elapsed:.1f} s "
        f"(start {max(t[0] for t in timings):.1f} s max, stop accepted after "
        f"{sum(t[1] for t in timings) / CYCLES:.1f} s mean, exit "
        f"{sum(t[2] for t in timings) / CYCLES:.1f} s mean); CPU per cycle: app "
        f"{cpu[0] / CYCLES:.2f} s, training process {cpu[1] / CYCLES:.2f} s; "
        f"RSS {mib(before['VmRSS']):.0f} -> {mib(right_after['VmRSS']):.0f} -> "
        f"{mib(after['VmRSS']):.0f} MiB; threads {before['Threads']} -> "
        f"{right_after['Threads']} -> {after['Threads']}"
    )
    print("\n" + report)
    assert settled, report
    assert after["VmRSS"] - before["VmRSS"] <= RSS_TOLERANCE_MIB * 1024, report
    # The app still answers, and its job limit still counts correctly (nothing is running).
    assert jobs.active_runs(root) == []
    assert (
        client(url)
        .predict("toy", 6, 60000, 4, 2, [], "auto", "dataset", False, 0, 1, api_name="/plan_split")[1]
        .startswith("**6 examples")
    )


# ---------------------------------------------------------------- docker stop


def test_sigterm_stops_the_apps_own_runs_with_a_checkpoint_before_it_leaves(tmp_path):
    # `docker stop`: the app, PID 1, answers the SIGTERM; ignored, after the grace period everything
    # in the container would be killed, its runs' steps since their last checkpoint lost.
    with open(tmp_path / "app.log", "wb") as log:
        app, url, root = start_app(tmp_path, log)
        cli = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "distcore",
                "train",
                "--run-dir",
                str(root / "by-cli"),
                *jobs.options_to_args(
                    {"replicas": 1, "model": "mlp", "epochs": 20, "train_examples": 512, "test_examples": 100}
                ),
            ],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            message = client(url).predict("by-app", *train_form(), api_name="/start_training")[0]
            assert message.startswith("Started **by-app**"), message
            assert wait_for(
                lambda: all((runs.read_status(root / name) or {}).get("step", 0) >= 8 for name in ("by-app", "by-cli")),
                timeout=180,
            )
            app.send_signal(signal.SIGTERM)
            assert app.wait(timeout=30) == 128 + signal.SIGTERM
            stopped = runs.read_status(root / "by-app")
            assert (
                stopped["state"] == "stopped"
                and runs.list_checkpoints(root / "by-app")[-1] == f"ckpt-{stopped['step']}"
            )
            assert jobs.is_active(root / "by-cli")  # not the app's: the CLI's user stops it
        finally:
            for proc in (app, cli):
                if proc.poll() is None:
                    proc.kill()
            cli.wait()
    said = (tmp_path / "app.log").read_text()
    assert "distcore app: stopped by-app; leaving." in said, said[-2000:]


# ---------------------------------------------------------------- a port in use


def test_a_port_in_use_ends_with_one_plain_line(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**os.environ, "GRADIO_SERVER_PORT": str(port), "DISTCORE_RUNS_DIR": str(tmp_path / "runs")}
        env.pop("GRADIO_SERVER_NAME", None)
        started = time.monotonic()
        proc = subprocess.run(
            [sys.executable, str(ROOT / "app.py")], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
        elapsed = time.monotonic() - started
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    assert proc.returncode != 0
    assert lines == [
        f"error: port {port} on 127.0.0.1 is already in use; stop whatever uses it "
        "or set GRADIO_SERVER_PORT to a free port."
    ], lines
    print(f"\nport in use: exit {proc.returncode} after {elapsed:.1f} s")


@pytest.mark.parametrize(
    "setting, expected",
    [
        ({"DISTCORE_MAX_JOBS": "0"}, "error: DISTCORE_MAX_JOBS (0) must be a whole number from 1 up."),
        ({"GRADIO_SERVER_PORT": "abc"}, "error: GRADIO_SERVER_PORT ('abc') must be a whole number from 1 to 65535."),
        (
            {"DISTCORE_RUNS_DIR": "{tmp}/a-file/runs"},
            "error: cannot make the runs folder {tmp}/a-file/runs (Not a directory); set DISTCORE_RUNS_DIR to a folder "
            "you can write.",
        ),
        (
            {"DISTCORE_RUNS_DIR": "{tmp}/a-file"},  # "it is a file", not "(File exists)"
            "error: cannot make the runs folder {tmp}/a-file (it is a file); "
            "set DISTCORE_RUNS_DIR to a folder you can write.",
        ),
    ],
)
def test_a_bad_app_setting_ends_with_one_plain_line(tmp_path, setting, expected):
    # Each ends in one plain line, not a traceback.
    (tmp_path / "a-file").write_text("")
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    env = {
        **os.environ,
        "GRADIO_SERVER_PORT": str(port),
        "DISTCORE_RUNS_DIR": str(tmp_path / "runs"),
        **{k: v.format(tmp=tmp_path) for k, v in setting.items()},
    }
    env.pop("GRADIO_SERVER_NAME", None)
    proc = subprocess.run(
        [sys.executable, str(ROOT / "app.py")], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode != 0
    assert (proc.stdout + proc.stderr).strip().splitlines() == [expected.format(tmp=tmp_path)]
