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
        with pytest.raises(
            DistcoreError, match=rf"^global batch size \({batch}\) must be a whole number from 1 to 10000"
        ):
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


def test_a_partial_batch_is_divided_by_its_own_count_and_the_tutorials_constant_is_not():
    full = loss_check(cpus(3), 6)  # 2 + 2 + 2
    assert full["examples"] == 6 and full["per_replica_examples"] == [2, 2, 2]
    for key in ("distributed", "tutorial_fixed_g", "keras_default"):  # all right on equal shares
        assert full[key] == pytest.approx(full["single_device"], rel=1e-5), key
    partial = loss_check(cpus(3), 6, examples=5)  # the last batch: 2 + 2 + 1
    assert partial["per_replica_examples"] == [2, 2, 1]
    assert partial["distributed"] == pytest.approx(partial["single_device"], rel=1e-5)
    assert partial["tutorial_fixed_g"] == pytest.approx(partial["single_device"] * 5 / 6, rel=1e-5)
    # Keras 3's default reduction: the mean of the replicas' means, wrong when the shares differ.
    assert partial["error_keras_default"] > 1e-3 * partial["single_device"]


def test_keras_default_reduction_cannot_be_summed_with_an_empty_replica():
    result = loss_check(cpus(3), 6, examples=4)  # 2 + 2 + 0
    assert result["per_replica_examples"] == [2, 2, 0]
    assert result["keras_default"] is None and result["error_keras_default"] is None
    assert "AddN" in result["keras_default_failure"] and "{{" not in result["keras_default_failure"]
    assert result["distributed"] == pytest.approx(result["single_device"], rel=1e-5)
    with pytest.raises(DistcoreError, match=r"examples in the batch \(7\) must be a whole number from 1 to 6"):
        loss_check(cpus(3), 6, examples=7)
