"""The loss-scaling demonstration, with pieces of every size, empty ones included."""

import json

import pytest

from conftest import cpus
from distcore import cli
from distcore.config import DistcoreError
from distcore.losscheck import loss_check


def test_a_replica_with_no_examples_adds_nothing():
    result = loss_check(cpus(4), 3)  # 1 + 1 + 1 + 0
    assert result["per_replica_examples"] == [1, 1, 1, 0]
    assert result["distributed"] == pytest.approx(result["single_device"], rel=1e-5)
    assert result["mistake_keras_mean"] == pytest.approx(result["single_device"] / 4, rel=1e-4)


def test_the_library_and_the_cli_check_the_batch_and_seed_as_training_does(capsys):
    # Issue: a batch of 12000 silently measured the 10000 test images and reported 12000; a batch of 0
    # raised TensorFlow's InvalidArgumentError; --seed 4294967296 raised numpy's ValueError (exit 1).
    for batch in (12000, 0):
        with pytest.raises(DistcoreError, match=rf"^global batch size \({batch}\) must be a whole number from 1 to 10000"):
            loss_check(cpus(2), batch)
    seed_error = "seed (4294967296) must be a whole number from 0 to 2147483647."
    with pytest.raises(DistcoreError) as caught:
        loss_check(cpus(2), 64, seed=2**32)
    assert str(caught.value) == seed_error
    assert cli.main(["loss-check", "--seed", str(2**32), "--replicas", "1", "--json"]) == 2
    assert json.loads(capsys.readouterr()[0]) == {"error": seed_error}


def test_device_names_are_read_as_a_device_set_and_reported_normalised():
    # Issue: "cpu:0,cpu:1" raised an IndexError, ("cpu:0", "cpu:0") TensorFlow's "No duplicates allowed".
    result = loss_check("CPU:0, cpu:1", 4)
    assert result["devices"] == ["cpu:0", "cpu:1"] and result["replicas"] == 2
    with pytest.raises(DistcoreError, match="device cpu:0 is listed twice"):
        loss_check(("cpu:0", "cpu:0"), 4)
