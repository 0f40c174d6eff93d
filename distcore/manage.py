"""Managing runs by name: rename, delete, and a short note kept in the run folder (notes.txt).

A run is named, never given as a path: a name is checked (runs.check_name: no '/', no '..',
not absolute) and its folder must be a real directory directly inside the runs folder, not a
link, and hold a run (config.json or job.json). A run whose process lives, or whose lock a
library Controller holds, is refused: its process writes the folder. The check and the change
happen under the runs folder's job and launch locks, so no launch starts the run in between.
No TensorFlow.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from . import joblimit, jobs, runs
from .config import DistcoreError

NOTES_FILE = "notes.txt"
MAX_NOTES = 500  # characters: a note is a line in the table, not a lab book


def run_folder(runs_root, name) -> Path:
    """The folder of run `name`: inside the runs folder, not a link, and a run."""
    if not name:
        raise DistcoreError("no run is picked: pick the run to rename, delete or note first.")
    run_dir = runs.safe_run_dir(runs_root, name)  # no '/', '..', absolute paths or links
    if not run_dir.is_dir():
        raise DistcoreError(f"there is no run named {name!r} in the runs folder.")
    if not ((run_dir / "config.json").is_file() or (run_dir / jobs.JOB_FILE).is_file()):
        raise DistcoreError(f"{name!r} in the runs folder holds no run (no config.json): distcore leaves it alone.")
    return run_dir


def refuse_if_running(run_dir: Path) -> None:
    name = run_dir.name
    pid = jobs.job_pid(run_dir) or runs.lock_holder(run_dir)
    if pid is not None:
        raise DistcoreError(f"run {name!r} is training (process {pid}): stop it first, then rename or delete it.")


@contextlib.contextmanager
def held(runs_root):
    """The runs folder's job and launch locks: no run is launched while they are held."""
    with joblimit.locked(runs_root), jobs.launching(runs_root):
        yield


def rename_run(runs_root, name, new_name) -> dict:
    """Rename run `name` to `new_name`; refused while it trains or when the name is taken."""
    new_name = runs.check_name(new_name, "new run name")
    with held(runs_root):
        run_dir = run_folder(runs_root, name)
        target = runs.safe_run_dir(runs_root, new_name)
        if new_name == run_dir.name:
            raise DistcoreError(f"run {name!r} already has that name.")
        if target.exists() or target.is_symlink():
            raise DistcoreError(f"the name {new_name!r} is taken in the runs folder: choose another.")
        refuse_if_running(run_dir)
        try:
            os.rename(run_dir, target)
        except OSError as err:
            raise DistcoreError(f"cannot rename {name!r}: {err.strerror}.") from None
        renamed_in_sweeps(runs_root, run_dir.name, new_name)
    return {"renamed": run_dir.name, "to": new_name}


def renamed_in_sweeps(runs_root, name: str, new_name: str) -> None:
    """The sweeps that list run `name` list it as `new_name`, so their tables and charts keep it."""
    from . import sweep

    for record_name in sweep.list_records(runs_root):
        record = sweep.read_record(runs_root, record_name) or {}
        if name not in record.get("runs", []):
            continue
        record["runs"] = [new_name if r == name else r for r in record["runs"]]
        for entry in record.get("entries", []):
            if entry.get("run") == name:
                entry["run"] = new_name
        runs.write_json_atomic(sweep.record_path(runs_root, record_name), record)


def delete_run(runs_root, name) -> dict:
    """Delete run `name` and everything in its folder; refused while it trains. The folder's
    own links are removed, never followed (shutil.rmtree)."""
    with held(runs_root):
        run_dir = run_folder(runs_root, name)
        refuse_if_running(run_dir)
        try:
            shutil.rmtree(run_dir)
        except OSError as err:
            raise DistcoreError(f"cannot delete {name!r} entirely: {err.strerror}.") from None
    return {"deleted": run_dir.name}


def read_notes(run_dir) -> str:
    try:
        return (Path(run_dir) / NOTES_FILE).read_text(encoding="utf-8", errors="replace")[:MAX_NOTES].strip()
    except OSError:
        return ""


def write_notes(runs_root, name, text) -> dict:
    """Keep `text` as run `name`'s note (empty: no note). Allowed while the run trains: its
    process never writes notes.txt."""
    text = str(text or "").strip()
    if len(text) > MAX_NOTES:
        raise DistcoreError(f"the note is {len(text)} characters long; a note holds at most {MAX_NOTES}.")
    run_dir = run_folder(runs_root, name)
    path, tmp = run_dir / NOTES_FILE, run_dir / f".{NOTES_FILE}.tmp{os.getpid()}"
    try:  # a new file renamed over the old one: never written through a link put in its place
        if text:
            tmp.write_text(text + "\n", encoding="utf-8")
            os.replace(tmp, path)
        else:
            path.unlink(missing_ok=True)
    except OSError as err:
        raise DistcoreError(f"cannot write {name!r}'s note: {err.strerror}.") from None
    return {"run": run_dir.name, "notes": text}
