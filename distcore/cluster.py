"""Beyond one process: `MultiWorkerMirroredStrategy` configured by `TF_CONFIG`.

Each worker is an ordinary `python -m distcore train --multi-worker ...` (or
`split --multi-worker ...`) process whose `TF_CONFIG` names the cluster and its own
place in it. Worker 0 is the chief: it owns the run directory (config, metrics,
status, checkpoints); the others write to temporary folders of their own and read
the run directory only to resume.

`launch()` starts W such workers on this machine on free loopback ports and
watches them: when one dies, the rest are stopped (SIGTERM, then SIGKILL after
`GRACE_SECONDS`), so a lost worker ends the whole job within
`FAILURE_BOUND_SECONDS` instead of leaving the others blocked in an all-reduce.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from . import devices, runs, settings, stopping
from .config import APIS, MODELS, OPTIMIZERS, POLICIES, DistcoreError

# Said by a worker started by hand that failed before it connected: TensorFlow's start-up
# barrier has no end, and its peers wait in it with no word of why.
PEERS_WAIT = (
    "The other workers, if started, wait for this one: start it again once that is fixed, or press "
    "Ctrl-C twice in each of them to stop them."
)
POLL_SECONDS = 0.2
GRACE_SECONDS = 3.0
FAILURE_BOUND_SECONDS = 10  # death noticed within POLL, the rest gone within GRACE + kill


@dataclass(frozen=True)
class Task:
    workers: int
    index: int
    addresses: tuple[str, ...] = ()  # every worker's host:port, the chief's first

    @property
    def address(self) -> str:
        return self.addresses[self.index] if self.addresses else "?"

    @property
    def is_chief(self) -> bool:
        return self.index == 0


def parse_tf_config(text: str | None) -> Task:
    """Check a TF_CONFIG value and return this process's place in the cluster."""
    if not text:
        raise DistcoreError("--multi-worker needs the TF_CONFIG environment variable (see docs/clusters.md).")
    try:
        spec = json.loads(text)
    except ValueError as err:
        raise DistcoreError(f"TF_CONFIG is not valid JSON ({err}).") from None
    cluster = spec.get("cluster") if isinstance(spec, dict) else None
    task = spec.get("task") if isinstance(spec, dict) else None
    if not isinstance(cluster, dict) or not isinstance(task, dict):
        raise DistcoreError(
            'TF_CONFIG must hold {"cluster": {"worker": [...]}, "task": {"type": "worker", "index": i}}.'
        )
    for job in ("chief", "worker"):  # a string's characters are not addresses
        if job in cluster and not isinstance(cluster[job], list):
            raise DistcoreError(
                f'TF_CONFIG cluster.{job} must be a JSON list of "host:port" strings, e.g. '
                f'["hostA:2222", "hostB:2222"]; got {json.dumps(cluster[job])}.'
            )
    if set(cluster) - {"worker", "chief"} or not cluster.get("worker"):
        raise DistcoreError(
            f"TF_CONFIG cluster must list workers (and optionally one chief); got job types {sorted(cluster)}."
        )
    addresses = list(cluster.get("chief", [])) + list(cluster["worker"])
    if not all(isinstance(a, str) and ":" in a for a in addresses) or len(set(addresses)) != len(addresses):
        raise DistcoreError(f"TF_CONFIG addresses must be distinct 'host:port' strings; got {addresses}.")
    for address in addresses:  # else TensorFlow's "Could not parse port", as a traceback
        check_port(address)
    kind, index = task.get("type"), task.get("index")
    if isinstance(index, bool) or not isinstance(index, int):  # TensorFlow would take "1" and True
        raise DistcoreError(
            f"TF_CONFIG task index {index!r} must be a whole number (0 for the first "
            f"{kind or 'worker'}), written without quotes."
        )
    if kind not in cluster or not 0 <= index < len(cluster[kind]):
        raise DistcoreError(f"TF_CONFIG task {task} does not name a member of the cluster {cluster}.")
    offset = len(cluster.get("chief", [])) if kind == "worker" else 0
    return Task(workers=len(addresses), index=index + offset, addresses=tuple(addresses))


def check_port(address: str) -> None:
    port = address.rsplit(":", 1)[1]
    if not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        raise DistcoreError(
            f"TF_CONFIG address {address!r} has no valid port ({port!r}): write host:port with a port from 1 to 65535."
        )


def peers_wait(err: DistcoreError) -> DistcoreError:
    """The error of a worker that failed before it connected, with what that leaves behind
    (PEERS_WAIT); as it is for the launcher's workers, which it stops itself."""
    return err if os.environ.get(stopping.LAUNCHED_ENV) else DistcoreError(f"{err} {PEERS_WAIT}")


def current_task() -> Task:
    return parse_tf_config(settings.get("TF_CONFIG"))


# What workers may be given differently: a path on each one's own host.
PER_HOST = ("data_dir",)
CHOICES = MODELS + OPTIMIZERS + POLICIES + APIS  # text fields whose value can be read back from its code


def agreement(config, resume: bool) -> dict:
    """Everything the workers of one run must agree on: the configuration, and whether it is a resume.
    Workers that differ would compute different steps, batches or checkpoints and wait in mismatched
    collectives (a hang) or train something wrong."""
    fields = {k: v for k, v in config.to_dict().items() if k not in PER_HOST}
    return {**fields, "resume": bool(resume)}


def code(value) -> int:
    """One int64 per field: the value itself where it fits (ints, bools, a float's bits), else a digest."""
    if isinstance(value, (bool, int)):
        return int(value)
    if isinstance(value, float):
        return struct.unpack("<q", struct.pack("<d", value))[0]
    digest = hashlib.sha256(json.dumps(value).encode()).digest()
    return int.from_bytes(digest[:8], "little", signed=True)


def decode(own, number: int):
    """Another worker's value of a field whose value here is `own`; None when only a digest
    travelled and it is not one this worker can recognise."""
    if code(own) == number:
        return own
    if isinstance(own, bool):
        return bool(number)
    if isinstance(own, int):
        return number
    if isinstance(own, float):
        return struct.unpack("<d", struct.pack("<q", number))[0]
    return next((c for c in CHOICES if code(c) == number), None) if isinstance(own, str) else None


def show(value) -> str:
    if value is None:
        return "something else"
    if isinstance(value, bool):
        return "given" if value else "not given"
    return ",".join(value) if isinstance(value, list) else str(value)


def describe_difference(name: str, own, theirs: int, chief: int) -> str:
    """e.g. "--global-batch 32 (worker 0: 64)"."""
    label = {"devices": "devices", "workers": "workers in TF_CONFIG"}.get(name, "--" + name.replace("_", "-"))
    return f"{label} {show(decode(own, theirs))} (worker 0: {show(decode(own, chief))})"


def disagreement(fields: dict, rows, replicas_per_worker: int = 1) -> str | None:
    """Compare the workers' codes (`rows`: one per replica, worker by worker) with worker 0's;
    None if all agree, else what differs. `fields` are this worker's, to read the values back."""
    names, chief = list(fields), list(rows[0])
    problems = []
    for worker in range(1, len(rows) // replicas_per_worker):
        row = list(rows[worker * replicas_per_worker])
        differ = [
            describe_difference(name, fields[name], row[i], chief[i])
            for i, name in enumerate(names)
            if row[i] != chief[i]
        ]
        if differ:
            problems.append(f"worker {worker}'s flags differ from worker 0's: " + ", ".join(differ))
    if not problems:
        return None
    return "; ".join(problems) + ". Start every worker with the same flags (and --resume on all of them or none)."


class FlagsDiffer(DistcoreError):
    """Workers given different flags, found once they connected: nothing was trained."""


def free_ports(count: int) -> list[int]:
    """Ports the OS reports free on loopback, all held open together so they differ."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def local_tf_configs(workers: int) -> list[str]:
    addresses = [f"127.0.0.1:{port}" for port in free_ports(workers)]
    return [
        json.dumps({"cluster": {"worker": addresses}, "task": {"type": "worker", "index": i}}) for i in range(workers)
    ]


@dataclass
class Outcome:
    returncodes: list[int]
    failed: int | None  # index of the first worker that failed, if any
    message: str
    seconds_to_stop: float | None  # from the first failure to the last worker gone
    stop_requested: int | None = None  # the first stop request's signal (passed on), if any


def launch(
    worker_args: list[str],
    workers: int,
    *,
    chief_stdout=None,
    log_dir: Path | None = None,
    gpus_per_worker: int = 0,
    timeout: float | None = None,
) -> Outcome:
    """Run `python -m distcore WORKER_ARGS` as `workers` processes of one cluster.

    Worker i's stdout goes to LOG_DIR/worker-i.out (the chief's to `chief_stdout`
    when given), its stderr to LOG_DIR/worker-i.log. SIGTERM and SIGINT are passed on
    to every worker, which holds them until its stop handler is in place (`held_stops`).
    The workers' temporary folders are removed however they end.
    """
    own_logs = log_dir is None
    log_dir = Path(log_dir or tempfile.mkdtemp(prefix="distcore-cluster-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    # The workers' temporary folders (a non-chief's checkpoints, metrics, logs) go in here,
    # a folder the launcher owns: a worker that is killed cannot clean up after itself.
    scratch = launcher_scratch()
    procs, files, asked = [], [], []

    def forward(signum, _frame):
        if not asked:  # the workers' own words go to their logs
            os.write(
                2,
                f"distcore: passing the stop on to the {workers} workers; they stop at the end of their "
                "loop of steps, with a checkpoint.\n".encode(),
            )
        asked.append(signum)
        for p in procs:
            if p.poll() is None:
                p.send_signal(signum)

    in_main = threading.current_thread() is threading.main_thread()  # signals can only be set there
    # Installed before the first worker starts, so no stop request can end the launcher
    # and leave workers behind.
    with stopping.handling(stopping.STOPS if in_main else (), forward):
        try:
            with held_stops(in_main):
                for index, tf_config in enumerate(local_tf_configs(workers)):
                    env = worker_env(index, tf_config, workers, gpus_per_worker, scratch)
                    log = open(log_dir / f"worker-{index}.log", "w")
                    out = open(log_dir / f"worker-{index}.out", "w")
                    files += [log, out]
                    stdout = chief_stdout if index == 0 and chief_stdout is not None else out
                    procs.append(
                        subprocess.Popen(
                            [sys.executable, "-m", "distcore", *worker_args],
                            env=env,
                            stdout=stdout,
                            stderr=log,
                            text=True,
                        )
                    )
                    (
                        Path(scratch) / f"worker-{procs[-1].pid}.pid"
                    ).touch()  # for launcher_scratch (a chief has no folder)
            outcome = watch(procs, log_dir, timeout)
            outcome.stop_requested = asked[0] if asked else None
        finally:
            stop_all(procs)  # nothing left to stop unless start-up or watching failed, and before
            for f in files:  # the earlier handlers are back
                f.close()
            shutil.rmtree(scratch, ignore_errors=True)
    if own_logs and outcome.failed is None:
        shutil.rmtree(log_dir, ignore_errors=True)  # kept after a failure, for the post-mortem
    elif own_logs:
        outcome.message += f" (worker logs: {log_dir})"
    return outcome


def launcher_scratch() -> str:
    """A new folder for the workers' temporary folders (their TMPDIR). Those of launchers
    killed with SIGKILL, which cannot clean up, are removed first, once none of their
    workers (each named by a worker-PID.pid file there) is alive either: orphaned workers
    go on training, and can still be stopped."""
    for old in Path(tempfile.gettempdir()).glob("distcore-workers-*-*"):
        pids = [old.name.split("-")[2]] + [inner.stem.removeprefix("worker-") for inner in old.glob("worker-*.pid")]
        if all(pid.isdigit() and not runs.pid_alive(pid) for pid in pids):
            shutil.rmtree(old, ignore_errors=True)
    return tempfile.mkdtemp(prefix=f"distcore-workers-{os.getpid()}-")


@contextlib.contextmanager
def held_stops(in_main: bool):
    """Block SIGTERM and SIGINT while the workers start, then take them again.

    A worker inherits the blocked mask through exec and keeps a stop request pending until
    its StopFlag.install() unblocks it: a stop forwarded before its handler is in place would
    kill it ("worker 0 was killed by SIGTERM" a few seconds after Start, the run left "died").
    A request that reaches the launcher meanwhile waits too, and is forwarded to every worker
    once all are started. The caller may have blocked them already (`cluster` does, from its
    GPU count on): they are unblocked here either way."""
    if in_main:
        signal.pthread_sigmask(signal.SIG_BLOCK, stopping.STOPS)
    try:
        yield
    finally:
        if in_main:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, stopping.STOPS)


def worker_env(index: int, tf_config: str, workers: int, gpus_per_worker: int, scratch: str) -> dict:
    env = {
        **os.environ,
        "TF_CONFIG": tf_config,
        "TMPDIR": scratch,  # TMPDIR: where tempfile creates
        stopping.LAUNCHED_ENV: "1",
    }  # watch() stops stuck workers itself
    if gpus_per_worker:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(index * gpus_per_worker + g) for g in range(gpus_per_worker))
    else:  # the workers share this host's cores, as replicas of one process do
        env.setdefault("TF_NUM_INTRAOP_THREADS", str(devices.intra_op_threads(workers)))
    return env


def watch(procs, log_dir: Path, timeout: float | None) -> Outcome:
    started = time.monotonic()
    failed, failed_at = None, None
    while any(p.poll() is None for p in procs):
        if failed is None:
            bad = first_failure(procs)
            late = timeout is not None and time.monotonic() - started > timeout
            if bad is not None or late:
                failed, failed_at = (-1 if bad is None else bad), time.monotonic()
                stop_all(procs)
        time.sleep(POLL_SECONDS)
    codes = [p.returncode for p in procs]
    if failed is None and any(codes):
        failed, failed_at = first_failure(procs), time.monotonic()
    if failed is None:
        return Outcome(codes, None, f"all {len(procs)} workers finished", None)
    seconds = time.monotonic() - failed_at
    if failed == -1:
        return Outcome(codes, -1, f"the cluster did not finish within {timeout:.0f} s and was stopped", seconds)
    message = f"worker {failed} {describe_exit(codes[failed])}; the other workers were stopped."
    if codes[failed] > 0:  # it failed by itself: its last words say why
        log = log_dir / f"worker-{failed}.log"
        message += f" Its log ends: {tail(log)}"
        # A worker that hangs (SIGSTOP, a frozen host) does not exit: the one that noticed does,
        # so the hung ones are named too, from TensorFlow's heartbeats.
        hung = [str(w) for w in unhealthy(log) if w != failed]
        if hung:
            message = (
                f"worker {', '.join(hung)} stopped responding (TensorFlow's heartbeats found it unhealthy), "
                f"so {message}"
            )
    return Outcome(codes, failed, message, seconds)


# TensorFlow's words, in a worker's log, for peers its coordination service lost:
# "The following tasks are unhealthy (stopped sending heartbeats):\n/job:worker/replica:0/task:1"
UNHEALTHY = re.compile(r"unhealthy \(stopped sending heartbeats\):\s*((?:/job:worker/replica:\d+/task:\d+\s*)+)")


def unhealthy(log: Path) -> list[int]:
    """The workers a worker's log says TensorFlow found unhealthy."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return []
    return sorted({int(task) for block in UNHEALTHY.findall(text) for task in re.findall(r"task:(\d+)", block)})


def first_failure(procs) -> int | None:
    """The index of the worker to blame among those that ended badly, if any. Found together,
    one killed by a signal is the cause and one that exited with an error the effect: a failed
    worker leaves at once, so worker 0's exit 2 over its lost peer can be found in the same
    poll as the SIGKILL that caused it, and is not blamed."""
    bad = [i for i, p in enumerate(procs) if p.poll() not in (None, 0)]
    return min(bad, key=lambda i: (procs[i].returncode > 0, i), default=None)


def stop_all(procs) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + GRACE_SECONDS
    while time.monotonic() < deadline and any(p.poll() is None for p in procs):
        time.sleep(POLL_SECONDS)
    for p in procs:
        if p.poll() is None:
            p.kill()  # blocked inside a collective, it cannot run a Python signal handler
    for p in procs:
        p.wait()


def describe_exit(code: int) -> str:
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with status {code}"


def tail(path: Path, lines: int = 3) -> str:
    noise = ("I0000", "W0000", "WARNING: All log", "warnings.warn", "UserWarning")
    try:
        text = [
            line
            for line in path.read_text(errors="replace").splitlines()
            if line.strip() and not any(n in line for n in noise)
        ]
    except OSError:
        return "(no log)"
    return " | ".join(line.strip()[:300] for line in text[-lines:]) or "(empty)"
