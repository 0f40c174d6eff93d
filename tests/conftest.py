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


# Test tiers. A test is `slow` when it runs TensorFlow work: it trains, plans a split, evaluates,
# checks the loss, starts a `python -m distcore` process that imports TensorFlow, starts the app
# with its planner, or drives a browser. `pytest -m "not slow"` (the fast tier) runs the rest in
# about a minute; CI runs both tiers. A test is slow when
#   - its module is in SLOW_MODULES (every test there does TensorFlow work), or
#   - it uses a fixture in SLOW_FIXTURES (each trains, or starts the planner), or
#   - it carries @pytest.mark.slow itself (modules that mix fast and slow tests).
# Every other test is fast, a new module's too: a module that trains, plans or evaluates goes in
# SLOW_MODULES, or its slow tests take @pytest.mark.slow. A test that is not slow and starts
# TensorFlow's runtime in this process fails and says so (the fast tier never starts it, so there
# each such test is caught); one that only starts a TensorFlow process is not seen by that check
# and must be marked by hand.
SLOW_MODULES = {
    "test_browser",
    "test_checkpoints",
    "test_controller",
    "test_events",
    "test_faults",
    "test_inputs",
    "test_loop",
    "test_losscheck",
    "test_many_users",
    "test_model",
    "test_optimizer",
    "test_security",
    "test_tasks",
}
SLOW_FIXTURES = {"trained_run", "finished_run", "planner"}


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config, items):
    for item in items:
        module = getattr(getattr(item, "module", None), "__name__", "")
        if module in SLOW_MODULES or SLOW_FIXTURES & set(item.fixturenames):
            item.add_marker(pytest.mark.slow)


def tensorflow_started() -> bool:
    """Whether TensorFlow's runtime has started in this process (its eager context is initialised);
    importing TensorFlow or configuring its devices does not start it."""
    module = sys.modules.get("tensorflow.python.eager.context")
    context = module.context_safe() if module else None
    return bool(getattr(context, "_initialized", False))


@pytest.fixture(autouse=True)
def fast_tests_start_no_tensorflow(request):
    """A test that is not marked slow fails if it starts TensorFlow's runtime, so the fast tier stays fast."""
    checked = not request.node.get_closest_marker("slow") and not tensorflow_started()
    yield
    if checked and tensorflow_started():
        pytest.fail(
            f"{request.node.nodeid} starts TensorFlow but is not marked slow: add its module to "
            "SLOW_MODULES in tests/conftest.py or mark the test @pytest.mark.slow",
            pytrace=False,
        )


def training_pieces(strategy, dist):
    """Each step's per-replica elements of `dist` as training's loop reads them on several CPU
    replicas (as lists); past the end of the data the pieces are empty."""
    import tensorflow as tf

    from distcore import inputs

    @tf.function
    def step(iterator):
        optional = inputs.get_next_as_optional(strategy, iterator)
        return optional.has_value(), strategy.experimental_local_results(optional.get_value())

    iterator, steps = inputs.train_iterator(strategy, dist), []
    while True:
        more, pieces = step(iterator)
        if not more:
            return steps
        steps.append([tf.nest.map_structure(lambda t: t.numpy().tolist(), piece) for piece in pieces])


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
    config = TrainConfig(devices=cpus(2), global_batch=64, epochs=1, seed=1, steps_per_loop=50, checkpoint_every=400)
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
