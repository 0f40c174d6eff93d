"""Run directories: one run = one directory = one record (no TensorFlow here).

    RUN/config.json      everything needed to repeat the run
    RUN/metrics.jsonl    append-only records, one JSON object per line, flushed each
    RUN/status.json      the training process's latest state (replaced atomically)
    RUN/checkpoints/     TensorFlow checkpoints (ckpt-STEP.index / .data-*)
    RUN/logs/            TensorBoard event files
    RUN/.lock            locked (flock) by the process training the run, while it does

The CLI, the app and the tests all read runs through these functions.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import math
import os
import re
import shutil
import tempfile
import time
import weakref
from collections.abc import Mapping
from pathlib import Path

from . import settings
from .config import MAX_LOGICAL_CPUS, DistcoreError, TrainConfig, UnevenBatch, check_utf8_path

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
CHECKPOINT = re.compile(r"^ckpt-(\d+)\.index$")
ACTIVE_STATES = ("starting", "running", "stopping")
EXPORT_PREFIX = "distcore-export-"
EXPORT_KEPT_SECONDS = 3600
NAME_MAX = 255  # bytes in one file name (Linux's filesystems); a longer one is OSError ENAMETOOLONG


def runs_root() -> Path:
    """DISTCORE_RUNS_DIR, else /data/runs on Hugging Face Spaces (persistent), else ./runs."""
    explicit = settings.get("DISTCORE_RUNS_DIR")
    if explicit:
        return Path(explicit)
    if settings.get("SPACE_ID") and Path("/data").is_dir():
        return Path("/data/runs")
    return Path("runs")


def ready_root(root=None) -> Path:
    """The runs folder (`root`, else runs_root()), made if missing and checked writable, so a
    folder the app cannot use is a DistcoreError naming DISTCORE_RUNS_DIR, not a PermissionError."""
    root = Path(root) if root else runs_root()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        why = "it is a file" if root.is_file() else e.strerror or e  # a file there: say so, not "File exists"
        raise DistcoreError(
            f"cannot make the runs folder {root} ({why}); set DISTCORE_RUNS_DIR to a folder you can write."
        ) from None
    if not os.access(root, os.W_OK | os.X_OK):
        raise DistcoreError(f"cannot write to the runs folder {root}; set DISTCORE_RUNS_DIR to a folder you can write.")
    return root.resolve()


def existing_root(root=None) -> Path:
    """The runs folder (`root`, else runs_root()) when it exists, for commands that only read or
    change runs in it: a mistyped folder is a DistcoreError, not a new empty folder."""
    root = Path(root) if root else runs_root()
    if not root.is_dir():
        raise DistcoreError(
            f"there is no runs folder {root}: name one with --runs-dir or DISTCORE_RUNS_DIR (default ./runs)."
        )
    return root.resolve()


def check_name(name, what: str = "run name") -> str:
    text = str(name or "").strip()
    if ".." in text or not NAME.match(text):
        raise DistcoreError(
            f"{what} {text!r} is not allowed: use 1-100 ASCII letters, digits, '_', '.' or '-', "
            "starting with a letter or digit (no '/', no '..')."
        )
    return text


def safe_run_dir(root, name) -> Path:
    """The directory of run `name` under `root`, refusing anything that escapes it."""
    root = Path(root).resolve()
    path = root / check_name(name)
    if path.is_symlink() or path.resolve().parent != root:
        raise DistcoreError(f"run {name!r} is not a directory inside the runs folder.")
    return path


def run_path(run_dir) -> Path:
    """A run directory as a user gave it, refused when empty (Path("") is the current folder),
    when a part of it is too long a name for the filesystem, or when it is a file. A leading
    ~ is the home folder, as in --data-dir (the shell leaves `--run-dir=~/r` as it is, so it is
    expanded here rather than made a folder named "~")."""
    if run_dir is None or not str(run_dir).strip():
        raise DistcoreError("the run directory is empty: name a folder for the run, e.g. runs/my-run.")
    if not isinstance(run_dir, (str, os.PathLike)):  # Path(5) would be a TypeError
        raise DistcoreError(f"the run directory ({run_dir!r}) must be a path, as text or a pathlib.Path.")
    path = Path(run_dir).expanduser()
    check_utf8_path(path, "the run directory")
    for part in path.parts:
        if len(os.fsencode(part)) > NAME_MAX:
            raise DistcoreError(
                f"the run directory's name {part[:40]!r}… is {len(os.fsencode(part))} bytes long; "
                f"a folder's name can have at most {NAME_MAX}: choose a shorter one."
            )
    try:
        is_file = path.exists() and not path.is_dir()
    except OSError as err:  # a path longer than the system takes
        raise DistcoreError(f"the run directory {str(path)[:60]!r}… cannot be used: {err.strerror}.") from None
    if is_file:
        raise DistcoreError(f"the run directory {path} is a file, not a folder: name a folder for the run.")
    return path


def check_new(run_dir) -> None:
    """A new run needs a directory that holds no run (checked before anything is launched), or
    one that never trained."""
    run_dir = run_path(run_dir)
    if list_checkpoints(run_dir) or ((run_dir / "config.json").exists() and not never_trained(run_dir)):
        raise DistcoreError(
            f"{run_dir} already holds a run: resume it (--resume; resume=True in "
            "Python), or pick another run directory."
        )


def never_trained(run_dir) -> bool:
    """Whether the run's config.json is all that a process left which ended before training: a
    chief stopped (a second Ctrl-C) or killed while it waited for its peers. No metrics.jsonl
    (written once all workers have connected), no checkpoint, and no other process of the run
    alive. A new run may start there, so the same command run again starts while the other
    workers still wait for it, instead of being told the folder "already holds a run"."""
    run_dir = Path(run_dir)
    if (run_dir / "metrics.jsonl").exists() or list_checkpoints(run_dir):
        return False
    ours = (os.getpid(), os.getppid())  # this process, and a `cluster` launcher that announced it
    holder, status = lock_holder(run_dir), read_status(run_dir) or {}
    if holder is not None and holder not in ours:  # a chief waiting for its peers holds the lock
        return False
    return not (status.get("state") in ACTIVE_STATES and status.get("pid") not in ours and pid_alive(status.get("pid")))


class RunHeld(DistcoreError):
    """The run's lock is held: another process or Controller trains it."""


class RunLock:
    """An exclusive lock on RUN/.lock, held by the process that trains the run.

    Two processes could train one run at once: a library resume beside a CLI run (the CLI's
    check looks for a `distcore train` process only), and two new runs started together,
    both past `check_new` before either wrote config.json. The kernel drops the lock when
    its process ends, however it ends. On a filesystem without locks, training goes on
    without one."""

    def __init__(self, run_dir):
        path = Path(run_dir) / ".lock"
        try:
            self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as err:
            raise unwritable(run_dir, err) from None
        # Also closed when the lock is dropped, so a Controller made but never run (its name
        # taken by a notebook's next cell) does not hold its run for the life of the kernel.
        self.close_fd = weakref.finalize(self, os.close, self.fd)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self.fd, 64, 0).decode(errors="replace").strip() or "another process"
            self.release()
            if holder == lock_text(os.getpid()):  # "trained by process N" named the caller itself
                raise RunHeld(
                    f"{run_dir} is held by another Controller in this process: run() it, or "
                    "close() it to let go of the run."
                ) from None
            raise RunHeld(
                f"{run_dir} is being trained by {holder} right now: stop it, or wait until it ends, then resume."
            ) from None
        except OSError:
            return  # (ENOLCK: no locks on this filesystem)
        try:
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, lock_text(os.getpid()).encode(), 0)
        except OSError as err:  # a full disk: a DistcoreError, not a traceback and a run reading "unknown"
            self.release()
            raise unwritable(run_dir, err) from None

    def release(self) -> None:
        if self.fd is not None:
            self.close_fd()
            self.fd = None


def lock_text(pid) -> str:
    """What RUN/.lock holds while process `pid` holds the lock (messages quote it)."""
    return f"process {pid}"


def lock_holder(run_dir) -> int | None:
    """The process that holds RUN/.lock (RunLock), read from /proc/locks: trying the lock
    here could refuse a Controller taking it at that instant. The lock's inode and the pid
    the holder wrote in the file must agree."""
    path = Path(run_dir) / ".lock"
    try:
        inode = path.stat().st_ino
        named = path.read_text(errors="replace")[:64].strip()
        with open("/proc/locks") as f:
            held = f.read().splitlines()
    except OSError:
        return None
    for line in held:  # "1: FLOCK  ADVISORY  WRITE 1234 fe:00:5678 0 EOF" (waiters have a "->")
        fields = line.split()
        if (
            len(fields) > 5
            and fields[1] == "FLOCK"
            and fields[4].isdigit()
            and fields[5].rsplit(":", 1)[-1] == str(inode)
            and named == lock_text(fields[4])
        ):
            return int(fields[4])
    return None


def unwritable(run_dir, err: OSError) -> DistcoreError:
    return DistcoreError(f"cannot write to the run directory {run_dir}: {err.strerror}.")


def claim_new_name(root) -> str:
    """A fresh automatic run name, claimed by creating its folder: two sessions starting a run
    in the same second get run-DATE-TIME and run-DATE-TIME-2, not one name between them."""
    root = Path(root)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as err:  # e.g. a file in its place: a message, not Gradio's bare "Error"
        raise DistcoreError(f"cannot make a run folder in {root}: {err.strerror}.") from None
    stamp = time.strftime("run-%Y%m%d-%H%M%S")
    for number in range(1, 100):
        name = stamp if number == 1 else f"{stamp}-{number}"
        try:
            (root / name).mkdir()
            return name
        except FileExistsError:
            continue
        except OSError as err:  # a full disk
            raise DistcoreError(f"cannot make a run folder in {root}: {err.strerror}.") from None
    raise DistcoreError("no free automatic run name this second: type a run name.")


def export_folder(now: float | None = None) -> Path:
    """A new temporary folder for one export of a run's files.

    The web app hands the exported files to Gradio, which copies them into its own cache
    (cleaned after a day) as it answers. So the exports in the temporary folder older than
    an hour are removed here, and clicks do not leave folders behind for good.
    """
    now = time.time() if now is None else now
    for old in Path(tempfile.gettempdir()).glob(EXPORT_PREFIX + "*"):
        with contextlib.suppress(OSError):
            if now - old.stat().st_mtime > EXPORT_KEPT_SECONDS:
                shutil.rmtree(old)
    return Path(tempfile.mkdtemp(prefix=EXPORT_PREFIX))


def write_json_atomic(path: Path, data: dict, in_place_if_full: bool = False) -> None:
    """Write to a temporary file and rename it over `path`: readers see old or new, never half.

    `in_place_if_full`: on a full disk, where the new file finds no room, rewrite `path` in
    the blocks it has instead (a status.json of ~100 bytes). A reader at that instant may
    find it cut short, which reads as "unknown"; otherwise a run that fails for want of room
    would stay "starting", and read "died"."""
    text = json.dumps(data, indent=2, sort_keys=True)
    tmp = Path(path).with_name(f".{Path(path).name}.tmp{os.getpid()}")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError as err:
        with contextlib.suppress(OSError):  # on a read-only filesystem this fails too (EROFS)
            tmp.unlink(missing_ok=True)
        if not (in_place_if_full and err.errno in (errno.ENOSPC, errno.EDQUOT) and overwrite(path, text)):
            raise DistcoreError(f"cannot write {path}: {err.strerror or err}.") from None


def overwrite(path: Path, text: str) -> bool:
    try:
        with open(path, "r+b") as f:
            f.write(text.encode())
            f.truncate()
        return True
    except OSError:
        return False


def write_status(run_dir, status: dict) -> None:
    write_json_atomic(Path(run_dir) / "status.json", status, in_place_if_full=True)


def read_json(path: Path) -> dict | None:
    """A JSON object from `path`, or None if it is missing, unreadable or not an object."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


# What a run's process, or the app's launch of it, writes before config.json.
RUN_TRACES = (".lock", "status.json", "job.json", "train.log")


def read_config(run_dir) -> dict:
    folder = run_path(run_dir)
    data = read_json(folder / "config.json")
    if data is None:
        ended = ended_before_training(run_dir)
        if ended:
            raise DistcoreError(
                f"{ended}, so there is nothing to resume, evaluate or export: start it again under the same name."
            )
        if (
            any((folder / name).exists() for name in RUN_TRACES) and not (folder / "config.json").exists()
        ):  # traces, no config.json: it ended before saving its settings
            raise DistcoreError(
                f"run {Path(run_dir).name} ended before it saved its settings (config.json; its log "
                "says why), so there is nothing to resume, evaluate or export: start it again under "
                "the same name."
            )
        raise DistcoreError(f"{run_dir} has no readable config.json: is it a distcore run directory?")
    return data


def saved_config(run_dir) -> TrainConfig:
    """The run's TrainConfig, read from its config.json; a file that does not make one
    (a field missing, a value out of range) is called damaged, naming what is wrong."""
    data = read_config(run_dir)
    try:
        return TrainConfig.from_dict(data)
    except DistcoreError as err:
        raise DistcoreError(
            f"{run_path(run_dir) / 'config.json'} is incomplete or damaged: {err} Restore the file, or start a new run."
        ) from None


def shown_config(run_dir) -> tuple[dict, str | None]:
    """config.json for a view: its fields once TrainConfig has checked them, and None; ({}, None)
    when there is none yet; ({}, why) when it does not make a TrainConfig (raw values such as
    "devices": 5, which cannot be joined, would fail the app's view)."""
    if not (Path(run_dir) / "config.json").exists():
        return {}, None
    try:
        return saved_config(run_dir).to_dict(), None
    except DistcoreError as err:
        return {}, str(err)


def ended_before_training(run_dir) -> str | None:
    """'run X was stopped (failed, died) before training began and saved nothing' for a run
    that ended before writing its config.json (it never will have a checkpoint), else None."""
    if (run_path(run_dir) / "config.json").is_file():
        return None
    status = read_status(run_dir) or {}
    state = status.get("state")
    if state == "starting" and not pid_alive(status.get("pid")):  # killed before it wrote more
        state = "died"
    if state not in ("stopped", "failed", "died"):
        return None  # still starting, or not a run
    why = {"stopped": "was stopped", "died": "died (its process is gone)"}.get(
        state, f"failed ({status.get('message')})"
    )
    return f"run {Path(run_dir).name} {why} before training began and saved nothing"


def no_checkpoint(run_dir) -> str:
    """Why run X has no checkpoint to evaluate. A run that has ended (stopped at step 0) never
    will have one, so it is not told "has no checkpoints yet", which suggests waiting."""
    ended = ended_before_training(run_dir)
    if ended:
        return (
            f"{ended}, so it has no checkpoint and never will: pick another run, or start it again under the same name."
        )
    status = read_status(run_dir) or {}
    state = status.get("state")
    if state in ACTIVE_STATES and not pid_alive(status.get("pid")):
        state = "died"
    if state in ("stopped", "failed", "died"):
        return (
            f"run {Path(run_dir).name} {state} before its first checkpoint: resuming it trains it from step 0; "
            "or pick another run."
        )
    return f"run {Path(run_dir).name} has no checkpoints yet."


def missing_checkpoint(run_dir, name: str, names: list[str]) -> str:
    """Why a run's checkpoint `name` is not among `names` (its checkpoints on disk, oldest first).
    A run that keeps its newest N deletes older ones while it trains, so one picked a moment
    before may be gone: the message says so rather than "choose one of run 'r''s checkpoints."."""
    listed = ", ".join(names[-5:]) + (f" (and {len(names) - 5} older)" if len(names) > 5 else "")
    text = f"run {Path(run_dir).name} has no checkpoint {name}; it has: {listed}."
    keep = (read_json(Path(run_dir) / "config.json") or {}).get("keep_checkpoints")
    if keep:
        text += (
            f" It keeps its newest {keep} (checkpoints kept: --keep-checkpoints) and deletes older ones "
            "as it saves new ones."
        )
    return text


def one_process_devices(saved: TrainConfig) -> tuple[str, ...]:
    """The devices a run resumes on in one process when none are given: its own, or, for a
    cluster's run on CPUs, as many logical CPUs as it had replicas (W workers of D devices each),
    so the resume keeps its replica count (up to MAX_LOGICAL_CPUS)."""
    if saved.workers <= 1 or not all(d.startswith("cpu:") for d in saved.devices):
        return saved.devices
    count = min(saved.workers * len(saved.devices), MAX_LOGICAL_CPUS)
    return tuple(f"cpu:{i}" for i in range(count))


def resume_config(run_dir, overrides: dict | None = None) -> TrainConfig:
    """The saved run's configuration with `overrides` applied, for a resume.

    The one check of a resume, made before anything is launched or written (the CLI's
    `train` and `cluster`, the app): it refuses changes that would make the run's
    checkpoints mean something else (model, batch, optimizer, ...), and a resume that
    leaves nothing to train. Needs no TensorFlow.
    """
    if overrides is not None and not isinstance(overrides, Mapping):  # a list: a message, not a TypeError
        raise DistcoreError(
            f"the changes for a resume must be a dict of fields and values, e.g. {{'epochs': 3}}, "
            f"not {type(overrides).__name__}."
        )
    saved = saved_config(run_dir)
    folder = Path(run_dir) / "checkpoints"
    if folder.exists() and not folder.is_dir():  # a file there: say so, not "no checkpoint yet"
        raise DistcoreError(
            f"cannot resume: {folder} is a file, not the run's folder of checkpoints. Move it "
            "away; with no checkpoints the run trains again from step 0."
        )
    overrides = overrides or {}
    try:
        wanted = saved.replace(**overrides)
    except DistcoreError as err:
        # A change a resume refuses anyway can make the mix invalid ("--api function" with the
        # saved 3 devices: "must divide evenly by ... (3)"): name the change, not the mix's problem.
        changed = {
            k: v
            for k, v in overrides.items()
            if k not in TrainConfig.RESUMABLE and v is not None and not same_value(v, getattr(saved, k))
        }
        if changed:
            raise changed_configuration(run_dir, {k: (getattr(saved, k), v) for k, v in changed.items()}) from None
        if isinstance(err, UnevenBatch):  # its "try 62" names a batch, which a resume cannot change
            raise uneven_resume(err) from None
        raise
    refuse_changes(run_dir, saved, wanted)
    check_steps_left(Path(run_dir), saved, wanted)
    return wanted


def uneven_resume(err: UnevenBatch) -> DistcoreError:
    g = err.global_batch
    fits = [str(n) for n in range(1, g + 1) if g % n == 0][:8]
    counts = fits[0] if len(fits) == 1 else f"{', '.join(fits[:-1])} or {fits[-1]}"
    return DistcoreError(
        f"cannot resume on {err.replicas} replicas: the run's global batch ({g}) stays as it is, "
        "and with distribute_datasets_from_function it must divide evenly by the number of "
        f"replicas: resume with a replica count of {counts}."
    )


def same_value(given, saved) -> bool:
    """A flag's text against a saved value: "64" is 64, "CNN" is "cnn"."""
    try:
        return float(given) == float(saved)
    except (TypeError, ValueError):
        return str(given).strip().lower() == str(saved).strip().lower()


def refuse_changes(run_dir, saved: TrainConfig, wanted: TrainConfig) -> None:
    """Refuse `wanted` where it differs from the run's `saved` configuration outside the fields
    a resume may change (resume_config, and a Controller a library caller resumes)."""
    conflicts = wanted.resume_conflicts(saved)
    if conflicts:
        raise changed_configuration(run_dir, {k: (getattr(saved, k), getattr(wanted, k)) for k in conflicts})


def changed_configuration(run_dir, changes: dict) -> DistcoreError:
    listed = ", ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in changes.items())
    return DistcoreError(
        f"cannot resume {run_dir} with a changed configuration ({listed}); its checkpoints were "
        f"trained with the saved values. Only {', '.join(TrainConfig.RESUMABLE)} may change; "
        "start a new run for the rest."
    )


def check_steps_left(run_dir: Path, saved: TrainConfig, wanted: TrainConfig) -> None:
    """Refuse a resume whose epochs and max steps end at or before the newest checkpoint."""
    names = list_checkpoints(run_dir)
    done = checkpoint_step(names[-1]) if names else 0
    total = wanted.total_steps()
    if total > done:
        return
    if total >= saved.total_steps():  # the same length (or longer, yet still reached)
        raise DistcoreError(
            f"run {run_dir.name} already finished at step {done} of {total}: {binding_limit(wanted)} to train more."
        )
    raise DistcoreError(
        f"cannot resume {run_dir.name} with epochs {wanted.epochs} and max steps {wanted.max_steps}: that makes "
        f"{total} steps, and the run has already trained {done} ({names[-1]}). To train more, use epochs of at "
        f"least {done // wanted.steps_per_epoch() + 1}, and max steps 0 (no limit) or more than {done}; "
        "the run is unchanged."
    )


def binding_limit(config: TrainConfig) -> str:
    """Which limit ends the run there, and how to lift it: epochs, max steps, or both when they
    end at the same step."""
    by_epochs = config.steps_per_epoch() * config.epochs
    one = config.epochs == 1
    epochs = f"its {config.epochs} epoch{'' if one else 's'}"
    if not config.max_steps or config.max_steps > by_epochs:
        return f"{epochs} end{'s' if one else ''} there; raise epochs"
    if config.max_steps < by_epochs:
        return f"its max steps ({config.max_steps}) end there; raise max steps, or set them to 0 (no limit),"
    return (
        f"{epochs} and its max steps ({config.max_steps}) both end there; raise epochs, and raise max "
        "steps or set them to 0 (no limit),"
    )


NUMBER = (int, float)
STATUS_KINDS = {
    "state": str,
    "message": str,
    "detail": str,
    "pid": int,
    "step": int,
    "total_steps": int,
    "epoch": int,
    "time": NUMBER,
    "examples_per_sec": NUMBER,
    "eta_seconds": NUMBER,
}
METRICS_KINDS = {
    "step": int,
    "epoch": int,
    "loss": NUMBER,
    "examples": NUMBER,
    "examples_per_sec": NUMBER,
    "train_loss": NUMBER,
    "train_accuracy": NUMBER,
    "test_loss": NUMBER,
    "test_accuracy": NUMBER,
    "time": NUMBER,
    "event": str,
    "message": str,
    "checkpoint": str,
}


def of_kind(key: str, value, kinds: dict) -> bool:
    """Whether `value` is of the kind `kinds` names for `key` (any, for a key it does not name);
    a bool is not a number here, though it is an int to Python."""
    kind = kinds.get(key)
    return kind is None or isinstance(value, kind) and not isinstance(value, bool)


def read_status(run_dir) -> dict | None:
    """status.json, without the fields whose values are not of their kind (a hand edit, damage):
    a step of "abc" would fail the app's view, and a state of 5 is not a run's state.
    A state that is gone reads as unknown."""
    status = read_json(Path(run_dir) / "status.json")
    if status is None:
        return None
    return {
        key: value
        for key, value in status.items()
        if value is None and key != "state" or of_kind(key, value, STATUS_KINDS)
    }


def read_metrics(run_dir) -> list[dict]:
    """All records of metrics.jsonl; a torn last line (a killed writer) is skipped, and so is
    any other line that is not a record distcore writes (damaged bytes, a hand edit): bytes
    that are not UTF-8 would fail the app's view, the export and a resume, and a step of "x" a
    plot and a resume's roll-back."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        return []
    with open(path, encoding="utf-8", errors="replace") as f:
        return [record for record in map(parse_record, f) if record is not None]


def parse_record(line: str) -> dict | None:
    """One line of metrics.jsonl as a record; None for a line that is not one (see read_metrics)."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if well_formed(record) else None


class RecordTail:
    """The records a run's metrics.jsonl gains, as they are written: each `new()` returns the
    well-formed records on the whole lines added since the last call, those with a time from
    `since` on. A rewritten file (a resume's roll-back, truncate_metrics) is read again from its
    start for the lines not given before, so the steps trained again after a restart come again,
    as they did in the run."""

    def __init__(self, run_dir, since: float):
        self.path = Path(run_dir) / "metrics.jsonl"
        self.since = since
        self.file, self.offset = None, 0
        self.given: set[bytes] = set()

    def new(self) -> list[dict]:
        try:
            with open(self.path, "rb") as f:
                stat = os.fstat(f.fileno())
                if (stat.st_dev, stat.st_ino) != self.file or stat.st_size < self.offset:
                    self.file, self.offset = (stat.st_dev, stat.st_ino), 0
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        whole = data[: data.rfind(b"\n") + 1]  # a line still being written waits for the next call
        self.offset += len(whole)
        out = []
        for line in whole.splitlines():
            if line in self.given:
                continue
            self.given.add(line)
            record = parse_record(line.decode("utf-8", errors="replace"))
            if record is not None and record.get("time", 0) >= self.since:
                out.append(record)
        return out


def well_formed(record) -> bool:
    """A metrics record: a JSON object whose fields are of their kinds (METRICS_KINDS). One pass
    over its fields: read_metrics reads every record of a run at each of the app's ticks."""
    return isinstance(record, dict) and all(of_kind(key, value, METRICS_KINDS) for key, value in record.items())


# Keys of a metrics record that are not a task's scalars.
RECORD_FIELDS = ("step", "epoch", "examples", "examples_per_sec", "time", "event", "message", "checkpoint")


def is_step_record(record: dict) -> bool:
    """A training step's record: its step, epoch, examples and the task's scalars ("loss"; the GAN's
    "d_loss" and "g_loss")."""
    return "event" not in record and "step" in record and "examples" in record


def is_epoch_record(record: dict) -> bool:
    """An epoch's record: "train_<metric>" means and the test metrics, no examples count."""
    return (
        "event" not in record
        and "epoch" in record
        and "examples" not in record
        and any(key.startswith("train_") for key in record)
    )


def record_scalars(record: dict) -> dict:
    """The task's named scalars in a record (in the record's order)."""
    return {
        k: v
        for k, v in record.items()
        if k not in RECORD_FIELDS and isinstance(v, (int, float)) and not isinstance(v, bool)
    }


def step_metric_names(metrics: list[dict]) -> list[str]:
    """The scalars the run's step records carry ("loss"; the GAN's "d_loss", "g_loss")."""
    for record in metrics:
        if is_step_record(record):
            return list(record_scalars(record))
    return []


def list_checkpoints(run_dir) -> list[str]:
    """Checkpoint names ('ckpt-STEP'), oldest first, from the files actually on disk."""
    folder = Path(run_dir) / "checkpoints"
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), f"ckpt-{m.group(1)}") for p in folder.iterdir() if (m := CHECKPOINT.match(p.name))]
    return [name for _, name in sorted(found)]


def checkpoint_step(name: str) -> int:
    match = re.fullmatch(r"ckpt-(\d+)", check_name(name, "checkpoint name"))
    if not match:
        raise DistcoreError(f"checkpoint name {name!r} must look like ckpt-STEP, e.g. ckpt-500.")
    return int(match.group(1))


class MetricsLog:
    """Append-only metrics.jsonl; each record is flushed so readers see it at once."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / "metrics.jsonl"
        try:
            self._file = open(self.path, "a", encoding="utf-8")
        except OSError as err:
            raise DistcoreError(f"cannot write {self.path}: {err.strerror or err}.") from None

    def write(self, record: dict) -> dict:
        # Milliseconds, cut, not rounded: rounded up, a record could read as written after a
        # status.json written a moment later (jobs.logged_end), and a run that died would read "failed".
        record = {**record, "time": math.floor(time.time() * 1000) / 1000}
        try:
            self._file.write(json.dumps(record) + "\n")
            self._file.flush()
        except OSError as err:
            raise DistcoreError(f"cannot write {self.path}: {err.strerror or err}.") from None
        return record

    def close(self) -> None:
        with contextlib.suppress(OSError):  # a record that could not be written fails its flush again
            self._file.close()


def last_logged_step(run_dir) -> int:
    steps = [r["step"] for r in read_metrics(run_dir) if "loss" in r and "step" in r]
    return max(steps, default=0)


def record_failure(run_dir, message: str) -> None:
    """Mark a run failed from outside its training process (e.g. the cluster launcher
    after a worker died and the chief had to be killed)."""
    run_dir = Path(run_dir)
    started, status = (run_dir / "config.json").is_file(), read_status(run_dir)
    if not started and status is None:
        return  # not a run: nothing to mark
    # Not the running chief's speed and ETA: a final status has none (as the trainer writes it).
    status = {k: v for k, v in (status or {}).items() if k not in ("examples_per_sec", "eta_seconds")}
    status.update(state="failed", message=message, time=time.time())
    write_status(run_dir, status)
    if not started:  # announced, never set up: the status above marks it failed (left "starting", it reads "died")
        return
    log = MetricsLog(run_dir)
    try:
        log.write({"event": "failed", "step": status.get("step", 0), "message": message})
    finally:
        log.close()


def truncate_metrics(run_dir, step: int, epochs: int | None = None) -> int:
    """Drop step and epoch records beyond `step` (training a resume rolls back over), and
    records of epochs after the first `epochs` (not closed in the restored checkpoint:
    the resume closes them again); events stay, as history. Rewritten atomically.
    Returns how many were dropped."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        return 0
    records = read_metrics(run_dir)
    keep = [r for r in records if "event" in r or (r.get("step", 0) <= step and not reopened(r, epochs))]
    torn = not path.read_bytes().endswith(b"\n")  # a writer killed mid-line
    if len(keep) == len(records) and not torn:
        return 0
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in keep))
    os.replace(tmp, path)
    return len(records) - len(keep)


def reopened(record: dict, epochs: int | None) -> bool:
    """An epoch record of an epoch after the first `epochs`."""
    return epochs is not None and "train_loss" in record and record.get("epoch", 0) > epochs


def proc_stat(pid) -> list[str]:
    """The fields of /proc/PID/stat after the command (state, parent pid, ...); [] for no such process."""
    try:
        with open(f"/proc/{int(pid)}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()  # (the command in brackets may hold spaces)
    except (TypeError, ValueError, OSError, IndexError):
        return []


def pid_alive(pid) -> bool:
    """True if pid runs and is not a zombie."""
    fields = proc_stat(pid)
    return bool(fields) and fields[0] not in ("Z", "X")


def read_system(run_dir) -> list[dict]:
    """RUN/system.jsonl: the training process's CPU, memory and GPU samples, oldest first
    (distcore.sysmetrics writes them; torn or foreign lines are skipped)."""
    from . import sysmetrics  # psutil is loaded only where samples are read

    return sysmetrics.read(run_dir)
