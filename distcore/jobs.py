"""Background processes for the app: training jobs, one-shot CLI calls, the split planner.

TensorFlow never runs in the caller's process: everything goes through
`python -m distcore ...` subprocesses. A training job is followed through its
run directory (status.json, metrics.jsonl, train.log), so any process (a page
reload, another browser, a restarted app) can pick it up again.
No module-level mutable state: the Planner is an object its owner creates.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from distcore import forms, runs
from distcore.config import DistcoreError

REPO_ROOT = Path(__file__).resolve().parent.parent
ACTIVE_STATES = runs.ACTIVE_STATES
JOB_FILE = "job.json"  # written by the launcher: the pid before status.json exists
LOG_FILE = "train.log"


def cli_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "distcore", *args]


def cli_env() -> dict:
    """The environment for CLI subprocesses: the repo importable from anywhere."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    return env


def _cli_error(stdout: str, stderr: str, code: int) -> str:
    """The user-facing message of a failed CLI call: {"error"} JSON, else `error:` line."""
    for line in reversed(stdout.strip().splitlines()):
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and "error" in obj:
            return str(obj["error"])
    lines = [line for line in stderr.strip().splitlines() if not _noise(line)]
    for line in reversed(lines):
        if line.startswith("error:"):
            return line[len("error:") :].strip()
    tail = f": {' | '.join(lines[-3:])}" if lines else ""
    if code < 0:  # the process got a signal; SIGKILL most often from the kernel's out-of-memory killer
        name = signal.Signals(-code).name if -code in signal.valid_signals() else f"signal {-code}"
        memory = " (out of memory?)" if -code == signal.SIGKILL else ""
        return f"the distcore process was killed by {name}{memory}{tail}"
    return f"distcore exited with code {code}{tail or ': no output'}"


def run_cli_json(args: list[str], timeout: float = 600) -> dict:
    """Run `python -m distcore ARGS --json`, return its JSON; DistcoreError with its message."""
    args = list(args) + ([] if "--json" in args else ["--json"])
    try:
        proc = subprocess.run(
            cli_command(*args), capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT, env=cli_env()
        )
    except subprocess.TimeoutExpired:
        raise DistcoreError(f"`distcore {args[0]}` took longer than {timeout:.0f} s and was stopped") from None
    if proc.returncode != 0:
        raise DistcoreError(_cli_error(proc.stdout, proc.stderr, proc.returncode))
    for line in reversed(proc.stdout.strip().splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            continue
    raise DistcoreError(f"`distcore {args[0]}` printed no JSON")


# ---------------------------------------------------------------- processes


def pid_cmdline(pid) -> list[str]:
    try:
        with open(f"/proc/{int(pid)}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except (TypeError, ValueError, OSError):
        return []


def is_train_process(pid, run_dir: Path) -> bool:
    """True if pid is live and trains this run: a `distcore train` (or `cluster`, or the driver of a
    Ray run, `train --engine ray`) for it, or
    a library caller's process that holds its lock, whose command line names no run (so a
    library run reads as running, and Resume does not start a process the lock would refuse)."""
    if not runs.pid_alive(pid):
        return False
    return is_distcore_command(pid, run_dir) or runs.lock_holder(run_dir) == int(pid)


def is_distcore_command(pid, run_dir: Path) -> bool:
    """True if pid is a `distcore train` or `cluster` for this run dir (guards against pid reuse).
    The app passes run directories in full; a user of the CLI may have given a relative one."""
    cmd = pid_cmdline(pid)
    # The installed command runs as [python, .../bin/distcore, ...]; the module as [python, -m, distcore, ...].
    program = any(Path(a).name == "distcore" for a in cmd[:2]) or ["-m", "distcore"] in map(list, zip(cmd, cmd[1:]))
    if not program or not ("train" in cmd or "cluster" in cmd):
        return False
    given = [b for a, b in zip(cmd, cmd[1:]) if a == "--run-dir"] + [
        a.split("=", 1)[1] for a in cmd if a.startswith("--run-dir=")
    ]
    folder = Path(f"/proc/{int(pid)}/cwd")  # a relative --run-dir is relative to that process's folder
    try:
        return any((folder / path).resolve() == Path(run_dir).resolve() for path in given)
    except OSError:
        return False


def job_pid(run_dir: Path) -> int | None:
    """The live training pid of a run, or None.

    status.json may still name the previous process right after a resume, and
    job.json (written by the launcher) names the new one before it writes any
    status, so both are checked.
    """
    for obj in (launch_record(run_dir), runs.read_status(run_dir)):
        if obj and obj.get("pid") and is_train_process(obj["pid"], run_dir):
            return int(obj["pid"])
    return None


def launch_record(run_dir) -> dict:
    """job.json, what the app's last launch of the run wrote ({} if none): its pid, "started",
    "resume" and "engine"."""
    return runs.read_json(Path(run_dir) / JOB_FILE) or {}


def launched_engine(run_dir) -> str:
    """The engine of the app's last launch of the run: "ray" (`train --engine ray`), else "local"."""
    return "ray" if launch_record(run_dir).get("engine") == "ray" else "local"


def launched_pid(run_dir: Path) -> int | None:
    """The process the app's last launch of this run started (job.json), alive or not."""
    pid = launch_record(run_dir).get("pid")
    return pid if isinstance(pid, int) else None


def trained_since_by_others(run_dir: Path, metrics: list[dict]) -> bool:
    """Whether a process the app did not launch trained the run after the app's last launch:
    that launch logs one start or resume event, a later CLI or library process another."""
    started = launch_record(run_dir).get("started")
    if started is None:
        return False
    return sum(m.get("event") in ("start", "resume") and m.get("time", 0) >= started for m in metrics) > 1


def check_not_training(run_dir) -> None:
    """Refuse to start a second training process on a run whose first one still runs."""
    pid = job_pid(Path(run_dir))
    if pid is not None and pid != os.getpid():
        raise DistcoreError(
            shutting_down(run_dir, str(run_dir), pid)
            or (
                f"{run_dir} is still training (process {pid}): stop it first ({how_to_stop(pid, Path(run_dir))}), "
                "then resume."
            )
        )


def how_to_stop(pid: int, run_dir: Path) -> str:
    """The advice for stopping process `pid`: a library caller's SIGTERM would end its whole
    program, a notebook's kernel with every step since the last checkpoint."""
    if is_distcore_command(pid, run_dir):
        return f"Ctrl-C there, or kill -TERM {pid}"
    return f"it is a Python program that uses distcore as a library: {LIBRARY_STOP}"


# How a library caller's run is stopped: a Controller made and not run holds the run too.
LIBRARY_STOP = (
    "stop it there (Ctrl-C, or its StopFlag's set(), while it trains; close() or del a Controller made and not run)"
)


def shutting_down(run_dir, label: str, pid: int) -> str | None:
    """The refusal for a run whose status is final while its process `pid` still lives, else None.
    A cluster's launcher outlives the chief's "stopped" by seconds (it waits for its workers
    to exit), so such a run is "shutting down", not "already training"."""
    status = runs.read_status(run_dir) or {}
    if status.get("state") not in ("stopped", "finished", "failed"):
        return None
    # Written before this process was launched: it is the previous process's last word, and
    # this one is starting (a second click on Resume must not call the new run "shutting down").
    if not written_since_launch(run_dir, status, unknown=True):
        return None
    state = status["state"]
    return (
        f"{label} has {state}, but its process {pid} is still shutting down (a cluster waits for its "
        "workers to exit); try again in a few seconds."
    )


def written_since_launch(run_dir, status: dict, *, unknown: bool) -> bool:
    """Whether `status` was written after the run's current process was launched (job.json's
    "started"); `unknown` when job.json does not say."""
    started = launch_record(run_dir).get("started")
    return unknown if started is None else status.get("time", 0) >= started


def refuse_if_busy(run_dir: Path, name: str) -> None:
    """Refuse to launch on a run whose process still lives, saying whether it trains or is exiting."""
    pid = job_pid(run_dir)
    if pid is not None:
        raise DistcoreError(shutting_down(run_dir, f"run {name!r}", pid) or f"run {name!r} is already training")


def is_active(run_dir: Path) -> bool:
    """A run is active while its training process lives (whatever status.json says)."""
    return job_pid(run_dir) is not None


def folders(runs_root) -> list[Path]:
    """The folders in the runs root (not the symlinks: a run is never outside it)."""
    root = Path(runs_root)
    return [p for p in root.iterdir() if p.is_dir() and not p.is_symlink()] if root.is_dir() else []


def unlisted_runs(runs_root) -> list[str]:
    """Folders in the root that hold a run (a config.json) under a name the app does not
    take (a copy named "my run (copy)"): never listed, they are named so as not to be passed
    over without a word."""
    return sorted(p.name for p in folders(runs_root) if not runs.NAME.match(p.name) and (p / "config.json").is_file())


def run_dirs(runs_root) -> list[Path]:
    """Run directories under the root, including ones still starting (no config.json yet)."""
    return [
        p
        for p in folders(runs_root)
        if runs.NAME.match(p.name) and ((p / JOB_FILE).is_file() or (p / "config.json").is_file())
    ]


def newest_first(paths: list[Path]) -> list[Path]:
    """Run directories, the most recently launched first: by job.json (written at every
    launch from the app) or config.json (written when training sets up), whichever is newer.
    A run stopped before it began has no config.json, so its launch time is all it has."""

    def launched(path: Path) -> float:
        times = [f.stat().st_mtime for f in (path / JOB_FILE, path / "config.json") if f.is_file()]
        return max(times, default=0.0)

    return sorted(paths, key=launched, reverse=True)


def active_runs(runs_root) -> list[str]:
    """Names of runs whose training process is alive."""
    return sorted(p.name for p in run_dirs(runs_root) if is_active(p))


def count_running(runs_root) -> int:
    return len(active_runs(runs_root))


def _reap(proc: subprocess.Popen) -> None:
    proc.wait()  # collects the exit status so no zombie stays behind


def start_training(
    runs_root,
    name: str,
    options: dict | list | None = None,
    resume: bool = False,
    workers: int = 1,
    engine: str = "local",
    ray_address: str = "",
) -> int:
    """Launch `distcore train` for run NAME in the background; return its pid at once.

    With `workers` > 1 it launches W worker processes of one MultiWorkerMirroredStrategy, the
    chief writing the run directory: `distcore cluster --workers W` (engine "local"), or
    `distcore train --engine ray --workers W` (engine "ray": Ray Train's workers, on the Ray
    cluster at `ray_address`, else on a local Ray the launched driver starts and stops). The pid is
    the launcher's (or the Ray driver's), which passes a stop on to every worker.
    """
    run_dir = runs.safe_run_dir(runs_root, name)
    command = forms.launch_command(workers, engine, ray_address)
    with launching(runs_root):
        return launch(run_dir, name, options, resume, command)


@contextlib.contextmanager
def launching(runs_root):
    """One launch at a time in a runs folder, across processes, so two apps on one folder cannot
    both check before either launches and both start a process for one run. Held from the
    checks until the new process shows (a few ms)."""
    try:
        fd = os.open(Path(runs_root) / ".launching", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError:  # an unwritable runs folder: the launch itself says so
        yield
        return
    try:
        with contextlib.suppress(OSError):  # (ENOLCK: no locks on this filesystem)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def launch(run_dir: Path, name: str, options, resume: bool, command: list[str]) -> int:
    refuse_if_busy(run_dir, name)
    if resume and not (run_dir / "config.json").is_file():  # no checkpoint yet is fine: it starts from 0
        raise DistcoreError(f"run {name!r} was never started, so there is nothing to resume")
    if not resume and (run_dir / "config.json").exists():
        raise DistcoreError(f"run {name!r} already exists; pick another name or resume it")
    engine = "ray" if "--engine" in command else "local"
    args = [*command, "--run-dir", str(run_dir.resolve()), *options_to_args(options)]
    if resume:
        args.append("--resume")
    with open_log(run_dir, args, resume) as log:
        proc = subprocess.Popen(
            cli_command(*args),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=REPO_ROOT,
            env=cli_env(),
            start_new_session=True,
        )  # survives the request, own signals
    try:
        record = {"pid": proc.pid, "started": time.time(), "resume": resume, "engine": engine}
        (run_dir / JOB_FILE).write_text(json.dumps(record))
    except OSError as err:  # untracked, it could be neither followed nor stopped
        proc.kill()
        proc.wait()
        if not resume:  # its empty job.json and log would list as a run, "unknown"
            forget_new_run(run_dir, JOB_FILE, LOG_FILE)
        raise runs.unwritable(run_dir, err) from None
    # Popen returns while the kernel is still finishing the exec: /proc/PID/cmdline reads
    # empty for a moment, and until it is filled in the job would not count as active (a
    # job-limit check right after this one would miss it). Wait until it shows.
    deadline = time.monotonic() + 10
    while not is_train_process(proc.pid, run_dir) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.001)
    threading.Thread(target=_reap, args=(proc,), daemon=True).start()
    return proc.pid


def open_log(run_dir: Path, args: list[str], resume: bool):
    """The run's train.log, opened to append, the command written to it. A runs folder that
    cannot be written is a plain error (not Gradio's bare "Error" on a full disk), and a new
    run's folder made for nothing is removed."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        log = open(run_dir / LOG_FILE, "ab")
        try:
            log.write(f"\n$ distcore {' '.join(args)}\n".encode())
            log.flush()
        except OSError:
            log.close()
            raise
        return log
    except OSError as err:
        if not resume:
            with contextlib.suppress(OSError):
                if (run_dir / LOG_FILE).stat().st_size == 0:
                    forget_new_run(run_dir, LOG_FILE)
            forget_new_run(run_dir)  # an earlier attempt's log stays
        raise runs.unwritable(run_dir, err) from None


def forget_new_run(run_dir: Path, *files: str) -> None:
    """Remove what a new run's failed launch left: `files`, then the folder if it is empty."""
    for name in files:
        with contextlib.suppress(OSError):
            (run_dir / name).unlink()
    with contextlib.suppress(OSError):
        run_dir.rmdir()


def options_to_args(options: dict | list | None) -> list[str]:
    """{"global_batch": 64, "drop_remainder": True} -> ["--global-batch", "64", "--drop-remainder"]."""
    if options is None:
        return []
    if isinstance(options, (list, tuple)):
        return [str(a) for a in options]
    args = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            args.append(flag)
        elif isinstance(value, (list, tuple)):
            args += [flag, ",".join(str(v) for v in value)]
        else:
            args += [flag, str(value)]
    return args


def stop_training(run_dir, startup_timeout: float = 90) -> bool:
    """SIGTERM the run's training process (it checkpoints at the next step); False if none.

    The trainer installs its SIGTERM handler before it first writes status.json,
    so a process that has not written its status yet is given time to get there:
    signalling it earlier would kill it without a checkpoint.
    """
    run_dir = Path(run_dir)
    deadline = time.monotonic() + startup_timeout
    while True:
        pid = job_pid(run_dir)
        if pid is None:
            return False
        if ready_to_stop(run_dir, pid) or time.monotonic() > deadline:
            if not is_distcore_command(pid, run_dir):  # its SIGTERM could end a notebook's kernel
                raise DistcoreError(
                    f"run {run_dir.name} is trained by process {pid}, a Python program that uses "
                    f"distcore as a library: {LIBRARY_STOP}."
                )
            os.kill(cluster_launcher(pid, run_dir) or pid, signal.SIGTERM)
            return True
        time.sleep(0.2)


def ready_to_stop(run_dir: Path, pid: int) -> bool:
    """Whether process `pid` has its stop handler in place: once the trainer (for a cluster: its
    chief, after the launcher, which passes a stop on to every worker) wrote a status of its own."""
    status = runs.read_status(run_dir) or {}
    fresh = written_since_launch(run_dir, status, unknown=False) and status.get("state") in ACTIVE_STATES
    return status.get("pid") == pid or fresh


def parent_pid(pid: int) -> int | None:
    fields = runs.proc_stat(pid)
    return int(fields[1]) if len(fields) > 1 else None


def own_runs(runs_root) -> dict[str, int]:
    """The runs whose training process this process launched and that still train: name -> pid."""
    found = {}
    for path in run_dirs(runs_root):
        pid = launched_pid(path)
        if pid is not None and parent_pid(pid) == os.getpid() and is_train_process(pid, path):
            found[path.name] = pid
    return found


def stop_own_runs(runs_root, timeout: float = 8.0) -> tuple[list[str], list[str]]:
    """Stop the runs this process launched, each with a checkpoint, as **Stop training** does,
    and wait up to `timeout` seconds for them to end; return the names of those that ended and
    of those still training (a loop of steps longer than the wait).

    The app's answer to SIGTERM. `docker stop`, Kubernetes and service managers send it, then
    kill everything in the container after a grace period (Docker's: 10 s), the training
    processes too, though they run in sessions of their own: without this, every step since a
    run's last checkpoint (up to an epoch) is lost, and the runs read "died". As PID 1 in a
    container, the app without a handler does not even see the SIGTERM.
    """
    own = own_runs(runs_root)
    # Each is signalled once ready_to_stop: a process still loading has no stop handler, and
    # one signalled then dies with no status, read as "unknown".
    waiting = dict(own)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(runs.pid_alive(pid) for pid in own.values()):
        for name, pid in list(waiting.items()):
            if ready_to_stop(Path(runs_root) / name, pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)  # a cluster launcher passes it on to its workers
                del waiting[name]
        time.sleep(0.1)
    for pid in waiting.values():  # as the wait ends: better than nothing
        if runs.pid_alive(pid):  # (one that ended meanwhile has nothing to stop)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
    going = sorted(name for name, pid in own.items() if runs.pid_alive(pid))
    return sorted(name for name in own if name not in going), going


def cluster_launcher(pid: int, run_dir: Path) -> int | None:
    """The `distcore cluster` that started chief `pid` of this run, if any. A cluster run from
    the CLI has no job.json, and its status names the chief; signalled alone, the chief would
    stop the run while the launcher, never signalled, exits 0. The launcher passes a stop on."""
    parent = parent_pid(pid)
    if parent and "cluster" in pid_cmdline(parent) and is_distcore_command(parent, run_dir):
        return parent
    return None


def wait_until_done(run_dir, timeout: float = 120, poll: float = 0.2) -> bool:
    """Wait for the run's process to end; True if it did within timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not is_active(run_dir):
            return True
        time.sleep(poll)
    return False


# ---------------------------------------------------------------- progress


@dataclass(frozen=True)
class Progress:
    """What a poll of a run directory shows; plain values only."""

    name: str
    state: str
    active: bool
    step: int
    total_steps: int
    epoch: int
    examples_per_sec: float | None
    eta_seconds: float | None
    message: str
    log_lines: tuple[str, ...]
    checkpoints: tuple[str, ...]
    has_config: bool = True  # False: it ended before it saved its settings; nothing to resume

    @property
    def live_speed(self) -> bool:
        """examples_per_sec is the last loop's (the run trains), else the run's mean (mean_speed)."""
        return live_speed(self.active, self.state)


def live_speed(active: bool, state: str) -> bool:
    return active and state in runs.ACTIVE_STATES


def tail_lines(path: Path, n: int, max_bytes: int = 64_000) -> list[str]:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read().decode(errors="replace")
    except OSError:
        return []
    return [line for line in data.splitlines() if line.strip() and not _noise(line)][-n:]


def _noise(line: str) -> bool:
    """TF's start-up chatter (absl INFO lines), which says nothing about the run."""
    return bool(re.match(r"I\d{4} ", line)) or line.startswith("WARNING: All log messages before absl")


def job_progress(run_dir, n_log: int = 12, metrics: list | None = None) -> Progress:
    """Status of one run from its directory: state, step, speed, ETA, last log lines."""
    run_dir = Path(run_dir)
    status = runs.read_status(run_dir) or {}
    active = is_active(run_dir)
    metrics = runs.read_metrics(run_dir) if metrics is None else metrics
    state, ended = state_and_end(run_dir, status, metrics)
    if ended:  # ended as its logs say, not as its status does
        status = {**status, "step": ended["step"], "message": ended.get("message", "")}
    live = status if state == "running" else {}
    last_step = next((m for m in reversed(metrics) if runs.is_step_record(m)), {})
    events = [_event_line(m) for m in metrics if "event" in m]
    logs = tail_lines(run_dir / LOG_FILE, n_log)
    return Progress(
        name=run_dir.name,
        state=state,
        active=active,
        step=int(status.get("step") or last_step.get("step") or 0),
        total_steps=shown_total(run_dir, status, state),
        epoch=int(status.get("epoch") or last_step.get("epoch") or 0),
        # A live run: what its running status says, which is nothing after a chunk that traced
        # (and while starting, when the status still holds the previous process's numbers).
        # A final state is the metrics' though its process lives on: a cluster's launcher waits
        # for its workers after the chief's "stopped", and the speed must not read "–" meanwhile.
        examples_per_sec=live.get("examples_per_sec") if live_speed(active, state) else mean_speed(metrics),
        eta_seconds=live.get("eta_seconds") if active else None,
        message=str(status.get("message") or "") or stalled_note(run_dir, status if active else {}),
        log_lines=tuple(events[-n_log:] + logs),
        checkpoints=tuple(runs.list_checkpoints(run_dir)),
        has_config=(run_dir / "config.json").is_file(),
    )


def shown_total(run_dir: Path, status: dict, state: str) -> int:
    """The run's total steps, as its status says. But a resume killed while it sets up leaves
    its new total in a "starting" status beside config.json, which only training would have
    changed: such a run shows config.json's total (not "died · step 47 / 94"), matching what a
    plain resume then trains to."""
    total = int(status.get("total_steps") or 0)
    if state != "died" or status.get("state") != "starting" or not (run_dir / "config.json").is_file():
        return total
    try:
        return runs.saved_config(run_dir).total_steps()
    except DistcoreError:  # (a damaged config.json: its view says so)
        return total


STALLED_SECONDS = 120  # with no new status for this long (or 5 loops, if longer), say so


def stalled_note(run_dir: Path, status: dict, now: float | None = None) -> str:
    """A note for a training process that has written no status for a long time, so a hung one
    does not read "running · ETA 5s" for good while Stop answers "Stopping" to no effect."""
    if status.get("state") != "running" or not status.get("time"):
        return ""
    config, speed = runs.shown_config(run_dir)[0], status.get("examples_per_sec")
    loop = (config.get("steps_per_loop", 0) * config.get("global_batch", 0) / speed) if speed else 0
    quiet = (time.time() if now is None else now) - status["time"]
    if quiet < max(STALLED_SECONDS, 5 * loop):
        return ""
    since = time.strftime("%H:%M:%S", time.localtime(status["time"]))
    return (
        f"No progress since {since} ({quiet:.0f} s): its process ({status.get('pid')}) may be stuck. Stop asks "
        "it to stop at the end of its loop; if it does not, end the process (`kill -9`), then Resume from "
        "the newest checkpoint."
    )


def mean_speed(metrics: list[dict]) -> float | None:
    """An ended run's examples/s: its examples over its loops' time, not the last loop's alone,
    which can move from 1,053 to 7,343 examples/s within one run. The first loop of each
    process is left out, as it also traced (7-30 examples/s; runs written by older versions
    logged its speed)."""
    examples = seconds = 0.0
    after_start, traced = False, None  # traced: the speed of the loop after a start or resume
    for r in metrics:
        if r.get("event") in ("start", "resume"):
            after_start = True
        elif runs.is_step_record(r):
            rate, count = r.get("examples_per_sec"), r.get("examples")
            if after_start:  # the first record of that loop
                after_start, traced = False, rate
            if rate and count and rate != traced:
                traced = None
                examples += count
                seconds += count / rate
    return examples / seconds if seconds else None


def run_state(run_dir, status: dict | None = None, metrics: list | None = None) -> str:
    """The state to show for a run: status.json's, but "died" when it says the run is active
    and no process is (gone without writing a final state), unless its log says how it ended.
    Only such a state costs a look at the process, so the run pickers can label every run
    each tick."""
    status = (runs.read_status(run_dir) or {}) if status is None else status
    return state_and_end(run_dir, status, metrics)[0]


def state_and_end(run_dir, status: dict, metrics: list | None = None) -> tuple[str, dict | None]:
    """run_state's state, and the logged end it was read from (logged_end), if it was."""
    state = status.get("state")
    if state and state not in ACTIVE_STATES:
        return state, None
    if is_active(Path(run_dir)):  # a status of a process now gone is the one before a resume's
        return (state if state and runs.pid_alive(status.get("pid")) else "starting"), None
    ended = logged_end(run_dir, status, runs.read_metrics(run_dir) if metrics is None else metrics)
    return (ended["event"] if ended else "died" if state else "unknown"), ended


FINAL_EVENTS = ("finished", "stopped", "failed")


def logged_end(run_dir: Path, status: dict, metrics: list[dict]) -> dict | None:
    """How a run ended, from its logs, when its process could not write status.json (disk
    full, its folder read-only or moved), rather than "died ... (killed, or a crash)" at an
    old step. The metrics' last event if it ends the run, else, when metrics.jsonl could not
    be written either, the `error:` line the process ended train.log with (the app's runs);
    either only if written after the status (any, when status.json is missing or damaged)."""
    since = status.get("time", float("inf")) if status else 0
    last = next((m for m in reversed(metrics) if "event" in m), None)
    if last and last["event"] in FINAL_EVENTS and last.get("time", 0) >= since:
        return last
    log = Path(run_dir) / LOG_FILE
    lines = tail_lines(log, 1)
    with contextlib.suppress(OSError):
        if lines and lines[-1].startswith("error: ") and log.stat().st_mtime >= since:
            step = max([status.get("step") or 0] + [m["step"] for m in metrics if runs.is_step_record(m)])
            return {"event": "failed", "step": step, "message": lines[-1][len("error: ") :]}
    return None


def _event_line(m: dict) -> str:
    stamp = time.strftime("%H:%M:%S", time.localtime(m.get("time", 0)))
    text = m.get("message") or m.get("checkpoint") or ""
    return f"[{stamp}] {m['event']} at step {m.get('step', '?')}: {text}".rstrip(": ")


# ---------------------------------------------------------------- planner


class Planner:
    """A long-lived `distcore planner` subprocess answering split requests (JSON lines).

    Started lazily, restarted if it died; a lock pairs each request with its
    response, so one Planner can be shared by all sessions (it keeps no state).
    """

    def __init__(self, start_timeout: float = 180, request_timeout: float = 120):
        self.start_timeout = start_timeout
        self.request_timeout = request_timeout
        self.max_replicas = None
        self._proc = None
        self._buffer = b""
        self._stderr = None
        self._lock = threading.Lock()

    def start(self) -> None:
        with self._lock:
            self._ensure_started()

    def plan(self, request: dict) -> dict:
        """Send one request, return the plan dict; DistcoreError on a user error."""
        with self._lock:
            self._ensure_started()
            try:
                self._proc.stdin.write((json.dumps(request) + "\n").encode())
                self._proc.stdin.flush()
                reply = self._read_json(self.request_timeout)
            except (OSError, DistcoreError) as e:
                self._kill()  # the next request starts a fresh planner
                raise DistcoreError(f"the split planner failed ({e}); try again") from e
        if "error" in reply:
            raise DistcoreError(str(reply["error"]))
        return reply

    def close(self) -> None:
        with self._lock:
            self._kill()

    def _ensure_started(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            return
        self._kill()
        self._stderr = tempfile.TemporaryFile()
        self._buffer = b""
        self._proc = subprocess.Popen(
            cli_command("planner"),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            cwd=REPO_ROOT,
            env=cli_env(),
        )
        try:
            ready = self._read_json(self.start_timeout)
        except DistcoreError as e:
            tail = self._stderr_tail()
            self._kill()
            raise DistcoreError(f"the split planner did not start: {e} {tail}".strip()) from e
        self.max_replicas = ready.get("max_replicas")

    def _read_json(self, timeout: float) -> dict:
        """Next JSON object line from stdout; skips any non-JSON lines."""
        deadline = time.monotonic() + timeout
        fd = self._proc.stdout.fileno()
        while True:
            while b"\n" in self._buffer:
                line, self._buffer = self._buffer.split(b"\n", 1)
                try:
                    obj = json.loads(line)
                except ValueError:
                    continue
                if isinstance(obj, dict):
                    return obj
            left = deadline - time.monotonic()
            if left <= 0:
                raise DistcoreError(f"no answer within {timeout:.0f} s")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    raise DistcoreError("the planner exited")
                self._buffer += chunk

    def _stderr_tail(self) -> str:
        try:
            self._stderr.seek(0)
            lines = self._stderr.read().decode(errors="replace").strip().splitlines()
        except (OSError, AttributeError):
            return ""
        return " | ".join(lines[-3:])

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        proc.wait()  # reap
        for stream in (proc.stdin, proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
