"""The scaling sweep: one configuration trained on each device set in turn, each its own run,
then examples/s, speed-up, parallel efficiency and time to a target accuracy per device set.

Runs start one after another through the runs folder's job limit (distcore.joblimit), as
the app's do; a sweep waits for a free slot rather than take a second one. Its record,
RUNS/<name>.sweep.json, is rewritten after each run, so the app (or a second terminal)
follows it. Speed is the run's mean examples/s over its timed loops (jobs.mean_speed).
No TensorFlow in this process.
"""

from __future__ import annotations

import math
import os
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from . import compare, forms, joblimit, jobs, runs
from .config import MAX_LOGICAL_CPUS, TRAIN_SIZE, DistcoreError, TrainConfig, check_int

SUFFIX = ".sweep.json"
DEFAULT_PER_REPLICA_BATCH = 64  # the tutorials' batch per replica
RUN_TIMEOUT = 1800  # seconds one run of a sweep may take before the sweep gives up on it


def int_list(text, what: str, high: int) -> tuple[int, ...]:
    """ "1,2,4" -> (1, 2, 4): each from 1 to `high`, none twice."""
    parts = [p.strip() for p in str(text or "").split(",") if p.strip()]
    if not parts:
        raise DistcoreError(f"{what} is empty: give counts such as 1,2,4.")
    values = tuple(check_int(what, p, high=high) for p in parts)
    if len(set(values)) < len(values):
        raise DistcoreError(f"{what} ({text}) lists a count twice: give each once, e.g. 1,2,4.")
    return values


@dataclass(frozen=True)
class Sweep:
    """What a sweep trains. `replicas`: device sets of one process (logical CPU devices, or
    GPUs where there are enough); `workers`: counts of worker processes (2 or more: a
    MultiWorkerMirroredStrategy cluster, one replica each; 1 adds nothing to `replicas`).
    Either a fixed `global_batch` (strong scaling: the same work split finer) or a
    `per_replica_batch` (weak scaling: the global batch grows with the replicas; default 64)."""

    replicas: tuple[int, ...] = (1, 2)
    workers: tuple[int, ...] = (1,)
    global_batch: int | None = None
    per_replica_batch: int | None = None
    max_steps: int = 40
    steps_per_loop: int = 10
    train_examples: int = TRAIN_SIZE
    test_examples: int = 2000
    target_accuracy: float | None = None
    name: str | None = None

    def __post_init__(self):
        set_ = object.__setattr__
        set_(self, "replicas", int_list(",".join(map(str, self.replicas)), "replicas", MAX_LOGICAL_CPUS))
        set_(self, "workers", int_list(",".join(map(str, self.workers)), "workers", 8))
        if self.global_batch is not None and self.per_replica_batch is not None:
            raise DistcoreError("give a global batch or a per-replica batch, not both.")
        if self.global_batch is None and self.per_replica_batch is None:  # weak scaling, by the tutorials' batch
            set_(self, "per_replica_batch", DEFAULT_PER_REPLICA_BATCH)
        if self.target_accuracy is not None and not 0 < float(self.target_accuracy) <= 1:
            raise DistcoreError(f"target accuracy ({self.target_accuracy}) must be above 0 and at most 1, e.g. 0.7.")
        set_(self, "max_steps", check_int("max steps", self.max_steps, high=100_000))
        if self.name is not None:
            set_(self, "name", runs.check_name(self.name, "sweep name"))
        if len(self.points()) < 2:
            raise DistcoreError(
                f"a sweep of one device set ({self.points()[0][0]} replica(s)) has nothing to compare its speed "
                "with: give two or more counts, e.g. replicas 1,2."
            )
        for replicas, workers in self.points():
            self.train_config(replicas, workers)  # every field checked before anything starts

    def points(self) -> list[tuple[int, int]]:
        """(replicas, workers) of each run, in order: the device sets of one process, then the
        clusters (each worker one replica)."""
        one = [(r, 1) for r in self.replicas]
        return one + [(w, w) for w in self.workers if w > 1 and (w, w) not in one]

    def batch(self, replicas: int) -> int:
        if self.global_batch is not None:
            return self.global_batch
        return self.per_replica_batch * replicas

    def train_config(self, replicas: int, workers: int) -> TrainConfig:
        batch = self.batch(replicas)
        epochs = max(1, math.ceil(self.max_steps * batch / self.train_examples))
        devices = ("cpu:0",) if workers > 1 else tuple(f"cpu:{i}" for i in range(replicas))
        return TrainConfig(
            devices=devices,
            global_batch=batch,
            epochs=epochs,
            max_steps=self.max_steps,
            steps_per_loop=self.steps_per_loop,
            train_examples=self.train_examples,
            test_examples=self.test_examples,
            workers=workers,
        )

    def args(self, replicas: int, workers: int) -> list[str]:
        """The run's flags; the replica count, not device names, so a GPU machine trains on GPUs."""
        flags = forms.train_args(self.train_config(replicas, workers))
        if workers == 1:
            at = flags.index("--devices")
            flags[at : at + 2] = ["--replicas", str(replicas)]
        return flags


def run_name(prefix: str, replicas: int, workers: int) -> str:
    return f"{prefix}-r{replicas}" + (f"-w{workers}" if workers > 1 else "")


def record_path(runs_root, name: str) -> Path:
    return Path(runs_root) / f"{runs.check_name(name, 'sweep name')}{SUFFIX}"


def run(runs_root, sweep: Sweep, max_jobs: int, log=None, poll: float = 1.0) -> dict:
    """Train each point of `sweep` in turn, each its own run in `runs_root`, and return the
    result (result()); RUNS/<name>.sweep.json follows it as it goes. Interrupted (Ctrl-C, a
    stop signal), it stops the run in training and records where it got to."""
    log = log or (lambda message: None)
    root = runs.ready_root(runs_root)
    prefix = sweep.name or time.strftime("sweep-%Y%m%d-%H%M%S")
    names = [run_name(prefix, r, w) for r, w in sweep.points()]
    for name in names:
        runs.check_name(name)
        if (root / name).exists():
            raise DistcoreError(f"run {name!r} already exists: give the sweep another name.")
    record = {"sweep": prefix, "state": "running", "settings": settings_of(sweep), "runs": names, "pid": os.getpid()}
    record["started"] = time.time()
    runs.write_json_atomic(record_path(root, prefix), record)
    current = None
    try:
        for (replicas, workers), name in zip(sweep.points(), names):
            log(f"{name}: {replicas} replica(s), {workers} worker process(es), global batch {sweep.batch(replicas)}")
            wait_for_slot(root, max_jobs, poll)
            with joblimit.slot(root, max_jobs):
                jobs.start_training(root, name, sweep.args(replicas, workers), workers=workers)
            current = root / name
            if not jobs.wait_until_done(current, timeout=RUN_TIMEOUT, poll=poll):
                jobs.stop_training(current)
                raise DistcoreError(f"run {name!r} took over {RUN_TIMEOUT} s; it was asked to stop.")
            current = None
            record.update(result(root, names, sweep.target_accuracy))
            runs.write_json_atomic(record_path(root, prefix), record)
        record["state"] = "finished"
    except BaseException as err:
        if current is not None:
            jobs.stop_training(current)
        record["state"] = "failed" if isinstance(err, DistcoreError) else "stopped"
        record["error"] = str(err) or type(err).__name__
        raise
    finally:
        record.update(result(root, names, sweep.target_accuracy))
        record["ended"] = time.time()
        runs.write_json_atomic(record_path(root, prefix), record)
    return record


def wait_for_slot(root: Path, max_jobs: int, poll: float) -> None:
    """Wait while the job limit is reached (other users' runs): a sweep queues, it is not refused."""
    while jobs.count_running(root) >= max_jobs:
        time.sleep(poll)


def settings_of(sweep: Sweep) -> dict:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in sweep.__dict__.items()}


def point(run_dir: Path, target: float | None) -> dict:
    """One run's entry: its device set, speed, accuracy, and time to the target accuracy."""
    config = runs.read_json(run_dir / "config.json") or {}
    metrics = runs.read_metrics(run_dir)
    speed = jobs.mean_speed(metrics)
    began = compare.start_time(metrics)
    reached = next(
        (m for m in metrics if target is not None and (m.get("test_accuracy") or 0) >= target and "time" in m), None
    )
    workers = config.get("workers", 1)
    return {
        "run": run_dir.name,
        "replicas": config.get("replicas") or len(config.get("devices") or []) * workers or None,
        "workers": workers,
        "global_batch": config.get("global_batch"),
        "devices": config.get("devices"),
        "gpu": any("GPU" in str(d) for d in config.get("physical_devices") or [])
        and any(str(d).startswith("gpu") for d in config.get("devices") or []),
        "state": jobs.run_state(run_dir, metrics=metrics) if run_dir.is_dir() else "not started",
        "examples_per_sec": round(speed, 1) if speed else None,
        "final_test_accuracy": compare.final_accuracy(metrics),
        "wall_seconds": compare.wall_seconds(metrics),
        "time_to_target_seconds": round(reached["time"] - began, 1) if reached and began else None,
    }


def result(root: Path, names: list[str], target: float | None) -> dict:
    """The entries of the runs done so far, each with its speed-up and parallel efficiency
    against the entry with the fewest replicas, and what limits scaling here."""
    entries = [point(root / n, target) for n in names if (root / n / "config.json").is_file()]
    measured = [e for e in entries if e["examples_per_sec"] and e["replicas"]]
    base = min(measured, key=lambda e: e["replicas"], default=None)
    for e in entries:
        if base and e in measured:
            e["speedup"] = round(e["examples_per_sec"] / base["examples_per_sec"], 3)
            e["efficiency"] = round(e["speedup"] / (e["replicas"] / base["replicas"]), 3)
        else:
            e["speedup"] = e["efficiency"] = None
    return {"entries": entries, "target_accuracy": target, "limit": scaling_limit(entries)}


def scaling_limit(entries: list[dict], cores: int | None = None) -> str:
    """What limits scaling on the machine the runs trained on, in a sentence or two."""
    cores = cores or len(os.sched_getaffinity(0))
    if entries and all(e["gpu"] for e in entries if e["workers"] == 1):
        return (
            "Each replica is its own GPU: speed-up measures real data parallelism, limited by the "
            "all-reduce of gradients and the input pipeline."
        )
    clusters = " Worker processes on one host share the same cores too, and add an all-reduce over loopback."
    return (
        f"The replicas here are logical CPU devices that share this machine's {cores} core(s), so an "
        "added replica adds no arithmetic. A speed-up can only come from the cores being used better (more "
        "work per step, the same per-step overhead); an efficiency near 1/replicas is what to expect, not a fault."
        + (clusters if any(e["workers"] > 1 for e in entries) else "")
        + " On GPUs the same sweep measures real scaling."
    )


def read_record(runs_root, name: str) -> dict | None:
    return runs.read_json(record_path(runs_root, name))


def list_records(runs_root) -> list[str]:
    """Sweep names in the runs folder, newest first."""
    root = Path(runs_root)
    found = [p for p in root.glob(f"*{SUFFIX}") if p.is_file() and not p.is_symlink()] if root.is_dir() else []
    found.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    return [p.name[: -len(SUFFIX)] for p in found if runs.NAME.match(p.name[: -len(SUFFIX)])]


def running(runs_root) -> str | None:
    """The sweep whose process is alive in this runs folder, if any."""
    for name in list_records(runs_root):
        record = read_record(runs_root, name) or {}
        if record.get("state") == "running" and runs.pid_alive(record.get("pid")):
            return name
    return None


def cli_args(sweep: Sweep, name: str, runs_root) -> list[str]:
    """`distcore sweep` flags that run `sweep` under `name` in `runs_root`."""
    args = ["sweep", "--replicas", ",".join(map(str, sweep.replicas)), "--workers", ",".join(map(str, sweep.workers))]
    if sweep.global_batch is not None:
        args += ["--global-batch", str(sweep.global_batch)]
    if sweep.per_replica_batch is not None:
        args += ["--per-replica-batch", str(sweep.per_replica_batch)]
    args += ["--max-steps", str(sweep.max_steps), "--steps-per-loop", str(sweep.steps_per_loop)]
    args += ["--train-examples", str(sweep.train_examples), "--test-examples", str(sweep.test_examples)]
    if sweep.target_accuracy is not None:
        args += ["--target-accuracy", str(sweep.target_accuracy)]
    return [*args, "--name", name, "--runs-dir", str(runs_root), "--json"]


def free_name(root: Path, sweep: Sweep, stamp: str | None = None) -> str:
    """The sweep's name: its own, refused when a sweep or run has it already, else sweep-DATE-TIME,
    with the next free suffix (-2, -3, ...) for a second sweep in the same second."""

    def taken(name: str) -> bool:
        points = sweep.points()
        return record_path(root, name).exists() or any((root / run_name(name, r, w)).exists() for r, w in points)

    if sweep.name:
        if taken(sweep.name):
            raise DistcoreError(f"a sweep or run named {sweep.name!r} exists already: name the sweep otherwise.")
        return sweep.name
    stamp = stamp or time.strftime("sweep-%Y%m%d-%H%M%S")
    return next(n for n in (stamp, *(f"{stamp}-{i}" for i in range(2, 1000))) if not taken(n))


def start(runs_root, sweep: Sweep, max_jobs: int) -> str:
    """Start `distcore sweep` in a process of its own (the app's way: it outlives the request)
    and return the sweep's name; RUNS/<name>.sweep.json follows it. One sweep at a time per
    runs folder: two would share the cores and measure each other."""
    root = runs.ready_root(runs_root)
    busy = running(root)
    if busy:
        raise DistcoreError(f"sweep {busy!r} is still running in this runs folder: wait until it ends.")
    name = free_name(root, sweep)
    runs.write_json_atomic(record_path(root, name), {"sweep": name, "state": "starting", "entries": []})
    env = {**jobs.cli_env(), "DISTCORE_MAX_JOBS": str(max_jobs)}
    with open(root / f"{name}.sweep.log", "w", encoding="utf-8") as log:
        proc = subprocess.Popen(
            jobs.cli_command(*cli_args(sweep, name, root)),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=jobs.REPO_ROOT,
            env=env,
            start_new_session=True,
        )
    threading.Thread(target=proc.wait, daemon=True).start()  # no zombie left behind
    return name
