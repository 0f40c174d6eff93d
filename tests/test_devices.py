import pytest

from distcore import devices
from distcore.config import DistcoreError


def test_device_lists_are_normalised():
    assert devices.parse_device_list("CPU:0, cpu:1,/device:CPU:2") == ("cpu:0", "cpu:1", "cpu:2")


@pytest.mark.parametrize("text,message", [
    ("", "empty"),
    (" , ", "empty"),
    ("cpu:0,cpu:0", "listed twice"),
    ("tpu:0", "unknown device name"),
    ("cpu0", "unknown device name"),
    ("cpu:0,gpu:0", "one kind"),
])
def test_bad_device_lists(text, message):
    with pytest.raises(DistcoreError, match=message):
        devices.parse_device_list(text)


def test_a_device_that_does_not_exist_is_named_with_what_exists():
    with pytest.raises(DistcoreError, match=r"gpu:0 does not exist; available: cpu:0 … cpu:15"):
        devices.resolve(devices="gpu:0", gpus=0)
    with pytest.raises(DistcoreError, match="cpu:99 does not exist"):
        devices.resolve(devices="cpu:99", gpus=0)


def test_counts_prefer_gpus_and_fall_back_to_logical_cpus():
    assert devices.resolve(replicas=2, gpus=4) == ("gpu:0", "gpu:1")
    assert devices.resolve(replicas=3, gpus=1) == ("cpu:0", "cpu:1", "cpu:2")
    with pytest.raises(DistcoreError, match="replicas"):
        devices.resolve(replicas=0, gpus=0)
    with pytest.raises(DistcoreError, match="either"):
        devices.resolve(replicas=2, devices="cpu:0")


def test_a_strategy_gets_one_replica_per_logical_cpu():
    strategy = devices.make_strategy(("cpu:0", "cpu:1", "cpu:2"))
    assert strategy.num_replicas_in_sync == 3


def test_inventory_reports_this_machine():
    info = devices.inventory()
    assert info["gpus"] == [] or info["gpus"][0] == "gpu:0"
    assert info["max_logical_cpus"] >= 8 and len(info["default"]) >= 2
