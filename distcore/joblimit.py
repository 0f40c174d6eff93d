"""The job limit of a runs folder: at most N training jobs at once, whoever starts them.

"Count the live jobs, then start one" holds an exclusive lock on `<runs>/.jobs.lock`
(fcntl.flock) from the count until the new process shows, so two sessions of one app, or two
app processes on one runs folder, never both start the last free job. A flock belongs to the open
file, so the threads of one process exclude each other too. No TensorFlow.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from . import jobs
from .config import DistcoreError

LOCK_FILE = ".jobs.lock"


def check(runs_root, max_jobs: int) -> None:
    """DistcoreError when `max_jobs` training jobs of this runs folder already run."""
    running = jobs.active_runs(runs_root)
    if len(running) >= max_jobs:
        raise DistcoreError(
            f"{len(running)} training job(s) are already running ({', '.join(running)}), and this "
            f"server allows {max_jobs} at a time. Stop one, or wait until one finishes."
        )


@contextlib.contextmanager
def locked(runs_root):
    """Holds the runs folder's job lock. A folder where the lock file cannot be made (read-only)
    is not locked: the launch in it then fails and says why."""
    try:
        fd = os.open(Path(runs_root) / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError:
        yield
        return
    try:
        with contextlib.suppress(OSError):  # ENOLCK: a filesystem without locks
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the file releases the lock


@contextlib.contextmanager
def slot(runs_root, max_jobs: int, busy: Path | None = None):
    """A free job slot, held (with the lock) until the block ends: start the job inside it.
    `busy`: a run to resume, refused first if its own process still lives (the limit counts
    that process too, and "already training" says more than "the limit is reached")."""
    with locked(runs_root):
        if busy is not None:
            jobs.refuse_if_busy(busy, busy.name)
        check(runs_root, max_jobs)
        yield
