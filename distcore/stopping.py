"""Stop requests (SIGTERM, SIGINT, "Stop training"), honoured without TensorFlow.

Before training begins there is nothing to save, so a stop request ends the
process at once (even in the middle of importing TensorFlow) and marks the run
stopped. Once the loop runs, a request only sets a flag: the outer loop sees it
between chunks of steps, saves a checkpoint and exits cleanly. A worker of a
cluster only ever sets the flag (see StopFlag).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

from . import runs
from .config import DistcoreError


class StopFlag:
    def __init__(self, run_dir=None, cluster: bool = False):
        self._event = threading.Event()
        self.run_dir = Path(run_dir) if run_dir else None
        # Set by the outer loop when the first step is about to run. A worker of a cluster
        # never leaves alone, not even before training: its peers may already wait for it
        # in TensorFlow's start-up barrier or first all-reduce, and would hang. Its stop
        # waits for the workers' agreement before the first chunk (they all stop at step 0).
        self.training = cluster

    def set(self, *_):
        self._event.set()
        if not self.training and self.run_dir is not None:
            self.exit_before_training()

    def is_set(self) -> bool:
        return self._event.is_set()

    def install(self):
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self.set)
        return self

    def announce(self, resume: bool) -> None:
        """Write a 'starting' status naming this process, so it can be stopped from now on
        (not over another run's status: a new run into a used directory is refused later)."""
        if self.run_dir is None or not self.run_dir.is_dir():
            return
        if resume or not (self.run_dir / "config.json").exists():
            status = runs.read_status(self.run_dir) or {}
            self.mark({**status, "state": "starting", "pid": os.getpid(), "message": ""})

    def mark(self, status: dict) -> None:
        try:
            runs.write_json_atomic(self.run_dir / "status.json", {**status, "time": time.time()})
        except DistcoreError:
            pass  # an unwritable run directory is reported, clearly, by whoever writes next

    def failed(self, message: str) -> None:
        """The set-up failed before training began: say so where the app looks."""
        status = runs.read_status(self.run_dir) if self.run_dir is not None else None
        if status is not None and status.get("pid") == os.getpid() and status.get("state") == "starting":
            self.mark({**status, "state": "failed", "message": message})

    def exit_before_training(self) -> None:
        status = runs.read_status(self.run_dir)
        if status is not None and status.get("pid") == os.getpid():
            self.mark({**status, "state": "stopped", "message": "stopped before training began"})
        os._exit(0)  # nothing trained yet, nothing to save: do not wait for TensorFlow to load
