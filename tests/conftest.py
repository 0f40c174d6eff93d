"""Test set-up: split the CPU into 8 logical devices before TensorFlow initialises.

A process can configure its logical devices once, so this happens at import
time, before any test module imports TensorFlow-using code. Strategies in the
tests then use any subset (1, 2, 3, 4, 5 replicas ...).
"""

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("DISTCORE_NO_DOWNLOAD", "1")  # CI has no internet; never try
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from distcore import devices  # noqa: E402

LOGICAL_CPUS = 8
devices.configure(LOGICAL_CPUS, replicas=2)  # threads as a 2-replica job has them, whatever test runs first


def wait_for(predicate, timeout=120, poll=0.2):
    """The predicate's first truthy value within `timeout` seconds, else its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(poll)


def cpus(n):
    return tuple(f"cpu:{i}" for i in range(n))


@pytest.fixture(scope="session")
def fmnist():
    from distcore import data

    return data.load()


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory):
    """One real epoch on the full Fashion-MNIST training set, 2 replicas, checkpoints every 400 steps."""
    from distcore.config import TrainConfig
    from distcore.controller import Controller

    run_dir = tmp_path_factory.mktemp("runs") / "epoch1"
    config = TrainConfig(devices=cpus(2), global_batch=64, epochs=1, seed=1, steps_per_loop=50,
                         checkpoint_every=400)
    result = Controller(config, run_dir).run()
    return run_dir, result


@pytest.fixture
def dropped_iterators(monkeypatch):
    """Watches inputs.drop_later: `deleted()` waits for its threads and returns the name
    of the thread each handed-over iterator was deleted on."""
    import threading
    import weakref

    from distcore import inputs

    real, threads, deleted_on = inputs.drop_later, [], []

    def watched(pipeline):
        weakref.finalize(pipeline[-1], lambda: deleted_on.append(threading.current_thread().name))
        threads.append(real(pipeline))
        return threads[-1]

    def deleted():
        for thread in threads:
            thread.join(timeout=120)
        return deleted_on

    monkeypatch.setattr(inputs, "drop_later", watched)
    return deleted


@contextlib.contextmanager
def tmpfs(mount, options):
    """A tmpfs mounted at `mount` with `options`, or a skip where mounting needs root."""
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount)], capture_output=True).returncode:
        pytest.skip("needs root to mount a tmpfs")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)])


def fill_disk(mount):
    """Fill the filesystem at `mount` with one file, to its last block."""
    with open(mount / "filler", "wb", buffering=0) as f, contextlib.suppress(OSError):
        while True:
            f.write(b"x" * 4096)


@contextlib.contextmanager
def tf_warnings():
    """The messages TensorFlow's Python logger gives out meanwhile, past its filters."""
    import logging

    import tensorflow as tf

    said = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())
    tf.get_logger().addHandler(handler)
    try:
        yield said
    finally:
        tf.get_logger().removeHandler(handler)
