"""The loss-scaling demonstration, with pieces of every size, empty ones included."""

import pytest

from conftest import cpus
from distcore.config import DistcoreError
from distcore.losscheck import loss_check


def test_a_replica_with_no_examples_adds_nothing():
    result = loss_check(cpus(4), 3)  # 1 + 1 + 1 + 0
    assert result["per_replica_examples"] == [1, 1, 1, 0]
    assert result["distributed"] == pytest.approx(result["single_device"], rel=1e-5)
    assert result["mistake_keras_mean"] == pytest.approx(result["single_device"] / 4, rel=1e-4)


def test_device_names_are_read_as_a_device_set_and_reported_normalised():
    # Issue: "cpu:0,cpu:1" raised an IndexError, ("cpu:0", "cpu:0") TensorFlow's "No duplicates allowed".
    result = loss_check("CPU:0, cpu:1", 4)
    assert result["devices"] == ["cpu:0", "cpu:1"] and result["replicas"] == 2
    with pytest.raises(DistcoreError, match="device cpu:0 is listed twice"):
        loss_check(("cpu:0", "cpu:0"), 4)
