"""distcore.joblimit: the job limit holds across app processes on one runs folder. No TensorFlow."""

import subprocess
import sys
import threading
import time

import pytest

from conftest import ROOT
from distcore import joblimit, jobs
from distcore.config import DistcoreError

# Each process counts up a shared file 200 times, reading and writing it inside the runs folder's
# job lock: a count that was not exclusive loses updates.
COUNT_UP = """
import sys, time
from pathlib import Path
from distcore import joblimit
root = Path(sys.argv[1])
for _ in range(200):
    with joblimit.locked(root):
        n = int((root / "count").read_text())
        time.sleep(0.0005)
        (root / "count").write_text(str(n + 1))
"""


def test_two_processes_count_and_start_one_at_a_time(tmp_path):
    (tmp_path / "count").write_text("0")
    procs = [subprocess.Popen([sys.executable, "-c", COUNT_UP, str(tmp_path)], cwd=ROOT) for _ in range(2)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    assert (tmp_path / "count").read_text() == "400"
    assert (tmp_path / joblimit.LOCK_FILE).is_file()


def test_a_second_slot_on_the_same_folder_waits_for_the_first(tmp_path, monkeypatch):
    # Two settings objects (two apps) on one runs folder: the second counts the jobs only after the
    # first has started its own, so it sees it, and refuses at a limit of one.
    started = []
    monkeypatch.setattr(jobs, "active_runs", lambda root: list(started))
    refused = []

    def second():
        try:
            with joblimit.slot(tmp_path, 1):
                started.append("second")
        except DistcoreError as err:
            refused.append(str(err))

    with joblimit.slot(tmp_path, 1):
        other = threading.Thread(target=second)
        other.start()
        time.sleep(0.3)  # it waits on the lock meanwhile
        assert other.is_alive() and refused == []
        started.append("first")
    other.join(timeout=10)
    assert started == ["first"]
    assert refused == [
        "1 training job(s) are already running (first), and this server allows 1 at a time. "
        "Stop one, or wait until one finishes."
    ]


def test_a_busy_run_is_refused_before_the_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(jobs, "active_runs", lambda root: ["r"])
    monkeypatch.setattr(jobs, "job_pid", lambda run_dir: 4242)
    monkeypatch.setattr(jobs, "shutting_down", lambda run_dir, label, pid: None)
    (tmp_path / "r").mkdir()
    with pytest.raises(DistcoreError, match="run 'r' is already training"):
        with joblimit.slot(tmp_path, 1, busy=tmp_path / "r"):
            pass
    with pytest.raises(DistcoreError, match="allows 1 at a time"):
        with joblimit.slot(tmp_path, 1):
            pass
    with joblimit.slot(tmp_path, 2):  # room for one more
        pass
