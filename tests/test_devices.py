import os
import subprocess
import sys

import pytest

from conftest import ROOT
from distcore import devices
from distcore.config import DistcoreError


def test_device_lists_are_normalised():
    assert devices.parse_device_list("CPU:0, cpu:1,/device:CPU:2") == ("cpu:0", "cpu:1", "cpu:2")


@pytest.mark.parametrize(
    "text,message",
    [
        ("", "empty"),
        (" , ", "empty"),
        ("cpu:0,cpu:0", "listed twice"),
        ("tpu:0", "unknown device name"),
        ("cpu0", "unknown device name"),
        ("cpu:0,gpu:0", "one kind"),
    ],
)
def test_bad_device_lists(text, message):
    with pytest.raises(DistcoreError, match=message):
        devices.parse_device_list(text)


def test_a_device_that_does_not_exist_is_named_with_what_exists():
    with pytest.raises(DistcoreError, match=r"gpu:0 does not exist; available: cpu:0 … cpu:15"):
        devices.resolve(devices="gpu:0", gpus=0)
    with pytest.raises(DistcoreError, match="cpu:99 does not exist"):
        devices.resolve(devices="cpu:99", gpus=0)


@pytest.mark.skipif(bool(devices.physical_gpu_count()), reason="this machine has a GPU")
def test_a_gpu_the_machine_lacks_is_refused_when_the_process_sets_up():
    # A TrainConfig cannot know the GPUs; TensorFlow would quietly run gpu:0's ops on the CPU.
    with pytest.raises(DistcoreError, match=r"gpu:0 does not exist; available: cpu:0 … cpu:15"):
        devices.prepare(("gpu:0",))


def test_counts_prefer_gpus_and_fall_back_to_logical_cpus():
    assert devices.resolve(replicas=2, gpus=4) == ("gpu:0", "gpu:1")
    assert devices.resolve(replicas=3, gpus=1) == ("cpu:0", "cpu:1", "cpu:2")
    with pytest.raises(DistcoreError, match="replicas"):
        devices.resolve(replicas=0, gpus=0)
    with pytest.raises(DistcoreError, match="either"):
        devices.resolve(replicas=2, devices="cpu:0")


@pytest.mark.slow
def test_a_strategy_gets_one_replica_per_logical_cpu():
    strategy = devices.make_strategy(("cpu:0", "cpu:1", "cpu:2"))
    assert strategy.num_replicas_in_sync == 3


def test_inventory_reports_this_machine():
    info = devices.inventory()
    assert info["gpus"] == [] or info["gpus"][0] == "gpu:0"
    assert info["max_logical_cpus"] >= 8 and len(info["default"]) >= 2


@pytest.mark.parametrize(
    "replicas, cores, threads", [(1, 2, 2), (2, 2, 1), (4, 2, 1), (1, 8, 8), (3, 8, 2), (16, 8, 1)]
)
def test_replicas_share_the_cores(replicas, cores, threads):
    assert devices.intra_op_threads(replicas, cores) == threads


def threads_in_a_fresh_process(env_threads=None, own=""):
    env = {k: v for k, v in os.environ.items() if k != "TF_NUM_INTRAOP_THREADS"}
    if env_threads is not None:
        env["TF_NUM_INTRAOP_THREADS"] = env_threads
    code = (
        own + "from distcore import devices; s = devices.make_strategy(('cpu:0', 'cpu:1'));"
        "import tensorflow as tf; tf.constant(1.0) + 1.0; print(devices.intra_op_setting(),"
        "tf.config.threading.get_intra_op_parallelism_threads())"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return [int(x) for x in out.stdout.split()]


@pytest.mark.slow
def test_a_two_replica_process_gives_each_op_its_share_and_a_users_setting_wins():
    share = devices.intra_op_threads(2)
    assert threads_in_a_fresh_process() == [share, share]
    assert threads_in_a_fresh_process("3") == [3, 0]  # TensorFlow reads the variable itself
    # A library caller's own setting, made before distcore's, is kept.
    assert threads_in_a_fresh_process(
        own="import tensorflow as tf; tf.config.threading.set_intra_op_parallelism_threads(3); "
    ) == [3, 3]


@pytest.mark.slow
def test_a_second_device_set_in_one_process_is_told_its_threads_differ_from_a_new_process():
    # A notebook's 1-replica run after a 2-replica one keeps 1 thread per op (a new process
    # uses 2), so its losses leave the CLI's from step 5: it is warned of.
    env = {k: v for k, v in os.environ.items() if k != "TF_NUM_INTRAOP_THREADS"}
    code = (
        "from distcore import devices; devices.make_strategy(('cpu:0', 'cpu:1')); "
        "print(devices.threads_differ(('cpu:0', 'cpu:1'))); print(devices.threads_differ(('cpu:1',)))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    same, other = out.stdout.splitlines()
    share, alone = devices.intra_op_threads(2), devices.intra_op_threads(1)
    assert same == "None"
    if share != alone:  # (a machine of one core: both are 1)
        assert other.startswith(
            f"this process runs each TensorFlow op on {share} thread(s), as set when TensorFlow "
            f"first ran here (by an earlier run or evaluation, or by you); a new process for 1 "
            f"replica(s) uses {alone}"
        )
    # After an evaluation with no strategy, which sets nothing: TensorFlow's default (it read
    # "on all the cores as thread(s)").
    code = (
        "import tensorflow as tf; tf.constant(1.0) + 1.0; from distcore import devices; "
        "print(devices.threads_differ(('cpu:0', 'cpu:1')))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.startswith(
        "this process runs each TensorFlow op on TensorFlow's default thread count (all the cores), as set when"
    ), out.stdout + out.stderr[-2000:]


@pytest.mark.parametrize("args", [("4x",), (0,), (17,), (True,), (2, -1)])
def test_configure_refuses_what_no_configuration_allows(args):
    with pytest.raises(DistcoreError, match="must be a whole number from"):
        devices.configure(*args)


@pytest.mark.slow
def test_a_strategy_reads_its_devices_as_a_device_set():
    # "cpu:0,cpu:1" works in prepare (not an IndexError), and ("cpu:0", "cpu:0") is refused with
    # distcore's message, not TensorFlow's "AssertionError: No duplicates allowed".
    assert devices.make_strategy("CPU:0, cpu:1").num_replicas_in_sync == 2
    with pytest.raises(DistcoreError, match="device cpu:0 is listed twice"):
        devices.make_strategy(("cpu:0", "cpu:0"))
