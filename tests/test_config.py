import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, strategies as st

from distcore.config import DistcoreError, SplitConfig, TrainConfig, check_choice, check_float, check_int

CPUS2 = ("cpu:0", "cpu:1")


@pytest.mark.parametrize("value", [0, -1, 1.5, float("nan"), float("inf"), "x", "", None, True, 10**12])
def test_bad_global_batch_is_refused_with_the_allowed_range(value):
    with pytest.raises(DistcoreError, match=r"global batch size .* must be a whole number from 1 to"):
        TrainConfig(devices=CPUS2, global_batch=value)


def test_batch_larger_than_dataset_says_what_is_allowed():
    with pytest.raises(DistcoreError, match=r"larger than the dataset \(6 examples\).*at most 6"):
        SplitConfig(examples=6, global_batch=8, devices=CPUS2)


def test_empty_device_set_is_refused():
    with pytest.raises(DistcoreError, match="device set is empty"):
        TrainConfig(devices=())


def test_library_device_sets_are_read_and_checked_as_the_cli_reads_them():
    # One string is a list of names, not a sequence of characters.
    assert TrainConfig(devices="cpu:0").devices == ("cpu:0",)
    assert SplitConfig(examples=8, global_batch=4, devices="CPU:0, cpu:1").devices == ("cpu:0", "cpu:1")
    for bad, message in [
        (("cpu:99",), "cpu:99 does not exist; available: cpu:0 … cpu:15"),
        (("cpu:0", "cpu:0"), "listed twice"),
        (("cpu:0", "gpu:0"), "mix of CPU and GPU"),
        (("tpu:0",), "unknown device name 'tpu:0'"),
    ]:
        with pytest.raises(DistcoreError, match=message):
            TrainConfig(devices=bad)


@pytest.mark.parametrize(
    "field,value,allowed",
    [
        ("policy", "sometimes", "auto, file, data, off"),
        ("api", "magic", "dataset, function"),
        ("model", "resnet", "cnn, mlp"),
        ("optimizer", "lbfgs", "adam, sgd"),
    ],
)
def test_choices_list_what_is_allowed(field, value, allowed):
    with pytest.raises(DistcoreError, match=allowed):
        TrainConfig(devices=CPUS2, **{field: value})


@pytest.mark.parametrize("rate", [0, -0.1, float("nan"), float("inf"), "fast"])
def test_bad_learning_rate(rate):
    with pytest.raises(DistcoreError, match="learning rate"):
        TrainConfig(devices=CPUS2, learning_rate=rate)


def test_function_api_needs_a_batch_that_divides_by_the_replicas():
    with pytest.raises(DistcoreError, match="divide evenly"):
        TrainConfig(devices=("cpu:0", "cpu:1", "cpu:2"), global_batch=64, api="function")


@pytest.mark.parametrize("policy", ["file", "off"])
def test_file_and_off_do_not_train_across_workers(policy):
    # OFF: every worker reads all 640 examples, so TensorFlow's epoch is 20 steps, not 10.
    with pytest.raises(DistcoreError, match=f"shard policy {policy.upper()} cannot train across 2 workers"):
        TrainConfig(devices=("cpu:0",), workers=2, policy=policy, train_examples=640)
    with pytest.raises(
        DistcoreError,
        match=f"split --workers 3 --policy {policy}" + (" --files 3 " if policy == "file" else " --examples"),
    ):
        TrainConfig(devices=("cpu:0",), workers=3, policy=policy, global_batch=63)  # a file per worker, at least
    TrainConfig(devices=("cpu:0",), workers=2, policy=policy, api="function")  # the policy is not used there
    TrainConfig(devices=("cpu:0", "cpu:1"), policy=policy)  # one process: nothing is divided between workers
    for shared in ("auto", "data"):
        TrainConfig(devices=("cpu:0",), workers=2, policy=shared)


def test_steps_per_epoch_counts_the_partial_last_batch():
    config = TrainConfig(devices=CPUS2, global_batch=64, train_examples=1000)
    assert config.steps_per_epoch() == 16  # 15 full + 1 of 40
    assert config.replace(drop_remainder=True).steps_per_epoch() == 15
    assert config.replace(epochs=3, max_steps=20).total_steps() == 20


def test_config_round_trips_through_a_dict():
    config = TrainConfig(devices=CPUS2, model="mlp", l2=0.001, seed=7)
    assert TrainConfig.from_dict(config.to_dict()) == config


def test_resume_conflicts_name_the_fields_that_changed():
    saved = TrainConfig(devices=CPUS2)
    assert saved.replace(epochs=5, devices=("cpu:0",)).resume_conflicts(saved) == []
    assert saved.replace(model="mlp", global_batch=32).resume_conflicts(saved) == ["model", "global_batch"]


@given(st.one_of(st.integers(), st.floats(allow_nan=True), st.text(max_size=8), st.none(), st.booleans()))
def test_check_int_accepts_exactly_whole_numbers_in_range(value):
    try:
        result = check_int("n", value, low=1, high=100)
    except DistcoreError as err:
        assert str(err).startswith(("n is empty:", "n (")) and "1 to 100" in str(err)
        return
    assert isinstance(result, int) and 1 <= result <= 100
    if isinstance(value, float):
        assert math.isfinite(value) and value == result


@pytest.mark.parametrize("value", [None, "", "  "])
def test_an_empty_value_is_called_empty_not_none(value):
    for check in (
        lambda: check_int("epochs", value),
        lambda: check_float("learning rate", value, low=0, high=1),
        lambda: check_choice("policy", value, ("auto", "off")),
    ):
        with pytest.raises(DistcoreError, match=r"^\w[\w ]* is empty: it must be ") as err:
            check()
        assert "None" not in str(err.value) and "''" not in str(err.value)


def test_a_split_plan_too_long_to_read_is_refused_before_running():
    with pytest.raises(DistcoreError, match=r"100000 steps; a split plan shows at most 2000.*at least 50"):
        SplitConfig(examples=100_000, global_batch=1, devices=CPUS2)


@given(examples=st.integers(-5, 200_000), batch=st.integers(-5, 70_000), files=st.integers(-2, 80))
def test_split_config_either_validates_or_says_why(examples, batch, files):
    try:
        config = SplitConfig(examples=examples, global_batch=batch, devices=CPUS2, files=files)
    except DistcoreError as err:
        assert str(err)[0].isalnum() and len(str(err)) < 300
        return
    assert 1 <= config.global_batch <= config.examples and -(-config.examples // config.global_batch) <= 2000


def test_numpy_integers_and_device_arrays_are_read_as_plain_values():
    # np.int64(64) is taken (not "global batch size (np.int64(64)) must be a whole number from 1 to
    # 65536"), and so is a numpy array of device names (not "truth value of an array is ambiguous").
    config = TrainConfig(
        devices=np.array(["cpu:0", "cpu:1"]), global_batch=np.int64(64), epochs=np.int32(2), seed=np.uint16(3)
    )
    assert (config.devices, config.global_batch, config.epochs, config.seed) == (CPUS2, 64, 2, 3)
    assert type(config.global_batch) is int and json.loads(json.dumps(config.to_dict()))["global_batch"] == 64
    split = SplitConfig(examples=np.int64(8), global_batch=np.int8(4), devices=np.array(["cpu:0"]))
    assert (split.examples, split.global_batch, split.devices) == (8, 4, ("cpu:0",))
    with pytest.raises(DistcoreError, match=r"global batch size \(0\) must be a whole number from 1 to 65536"):
        TrainConfig(devices=CPUS2, global_batch=np.int64(0))
    with pytest.raises(DistcoreError, match=r"^devices \(5\) must be device names, as a list"):
        TrainConfig(devices=5)


@pytest.mark.parametrize("value", ["False", "false", "", 0, 1, None])
def test_drop_remainder_must_be_true_or_false(value):
    # drop_remainder="False" is not read as True (bool("False")), in TrainConfig or in the planner.
    for make in (
        lambda: TrainConfig(devices=CPUS2, drop_remainder=value),
        lambda: SplitConfig(examples=8, global_batch=4, devices=CPUS2, drop_remainder=value),
        lambda: SplitConfig(examples=8, global_batch=4, devices=CPUS2, map_after_batch=value),
    ):
        with pytest.raises(DistcoreError, match=r"^(drop_remainder|map_after_batch) .*must be true or false"):
            make()
    assert TrainConfig(devices=CPUS2, drop_remainder=np.bool_(True)).drop_remainder is True


def test_both_configs_suggest_a_batch_that_divides_by_the_replicas():
    # Both messages name a global batch that would do, never a bare "try 63".
    cpus3 = ("cpu:0", "cpu:1", "cpu:2")
    with pytest.raises(DistcoreError) as train:
        TrainConfig(devices=cpus3, global_batch=64, api="function")
    with pytest.raises(DistcoreError) as split:
        SplitConfig(examples=640, global_batch=64, devices=cpus3, api="function")
    assert (
        str(train.value)
        == str(split.value)
        == (
            "with distribute_datasets_from_function the global batch (64) must divide evenly by the number "
            "of replicas (3); try a global batch of 63 or 66."
        )
    )


def test_a_data_dir_is_kept_as_an_absolute_path_in_text(tmp_path, monkeypatch):
    # data_dir=Path(...) is stored as text (else config.json fails: "Object of type PosixPath is not JSON
    # serializable"), and absolute, so it still names the folder from another one.
    monkeypatch.chdir(tmp_path)
    assert TrainConfig(devices=CPUS2, data_dir=Path("dcopy")).data_dir == str(tmp_path / "dcopy")
    assert json.loads(json.dumps(TrainConfig(devices=CPUS2, data_dir="d/../e").to_dict()))["data_dir"] == str(
        tmp_path / "e"
    )
    assert TrainConfig(devices=CPUS2, data_dir="~/fm").data_dir == str(Path.home() / "fm")
    assert TrainConfig(devices=CPUS2, data_dir="").data_dir is None
    with pytest.raises(DistcoreError, match=r"^data folder \(5\) must be a path"):
        TrainConfig(devices=CPUS2, data_dir=5)


def test_a_bool_is_not_a_number_for_float_fields_either():
    # TrainConfig(learning_rate=True) trained at 1.0, where check_int refuses True for 1.
    with pytest.raises(DistcoreError, match=r"^learning rate \(True\) must be a number\.$"):
        TrainConfig(devices=CPUS2, learning_rate=True)
    assert str(TrainConfig(devices=CPUS2, l2=-0.0).l2) == "0.0"  # as config.json will say


def test_a_configuration_or_its_changes_of_the_wrong_type_are_refused_plainly(tmp_path):
    # from_dict(["cpu:0"]) and resume_config(run, ["epochs"]) say what they need, not "the
    # configuration has no devices." or a TypeError.
    from distcore import runs

    with pytest.raises(DistcoreError, match="^a configuration must be a dict of its fields, not list.$"):
        TrainConfig.from_dict(["cpu:0"])
    with pytest.raises(DistcoreError, match=r"^the changes for a resume must be a dict .*not list\.$"):
        runs.resume_config(tmp_path, ["epochs"])
