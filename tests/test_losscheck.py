"""The loss-scaling demonstration, with pieces of every size, empty ones included."""

import pytest

from conftest import cpus
from distcore.losscheck import loss_check


def test_a_replica_with_no_examples_adds_nothing():
    result = loss_check(cpus(4), 3)  # 1 + 1 + 1 + 0
    assert result["per_replica_examples"] == [1, 1, 1, 0]
    assert result["distributed"] == pytest.approx(result["single_device"], rel=1e-5)
    assert result["mistake_keras_mean"] == pytest.approx(result["single_device"] / 4, rel=1e-4)
