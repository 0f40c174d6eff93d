"""A run's data: the user's arrays and .npz files are checked before anything trains."""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT
from distcore import datasets
from distcore.config import DistcoreError, TrainConfig


def good(n=40, m=10, features=8, classes=3, seed=0):
    rng = np.random.default_rng(seed)
    return {
        "x_train": rng.normal(size=(n, features)).astype("float32"),
        "y_train": np.arange(n) % classes,
        "x_test": rng.normal(size=(m, features)).astype("float32"),
        "y_test": np.arange(m) % classes,
    }


def with_(**changes):
    arrays = good()
    arrays.update(changes)
    return {k: v for k, v in arrays.items() if v is not None}


BAD = {
    "a missing key": (with_(y_test=None), "has no y_test: it needs x_train, y_train, x_test, y_test"),
    "rows that disagree": (with_(y_train=np.zeros(39, int)), "x_train has 40 rows but y_train has 39"),
    "a negative label": (with_(y_train=np.r_[-1, np.zeros(39, int)]), "y_train holds -1: labels must be class"),
    "text": (with_(x_train=np.array([["a"] * 8] * 40)), "x_train holds <U1 values: it must hold numbers"),
    "fractional labels": (with_(y_test=np.full(10, 0.5)), "y_test holds values that are not whole numbers"),
    "an empty split": (with_(x_test=np.zeros((0, 8)), y_test=np.zeros(0, int)), "x_test is empty"),
    "shapes that differ": (with_(x_test=np.zeros((10, 9))), "x_train has examples of shape (8,) but x_test of (9,)"),
    "one value per row": (with_(x_train=np.zeros(40)), "x_train has shape (40,): it must have one row per example"),
    "NaN": (with_(x_train=np.full((40, 8), np.nan)), "x_train holds NaN or infinite values"),
    "one-hot labels": (with_(y_train=np.eye(3)[np.arange(40) % 3]), "y_train has shape (40, 3)"),
    "a test class never trained": (with_(y_test=np.full(10, 7)), "y_test holds class 7, which y_train never has"),
}


@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_bad_arrays_are_refused_with_what_is_wrong(case):
    arrays, message = BAD[case]
    with pytest.raises(DistcoreError, match=re.escape(message)):
        datasets.check_arrays(arrays)
    if len(arrays) == 4:  # the library's Arrays checks the same way
        with pytest.raises(DistcoreError, match=re.escape(message)):
            datasets.Arrays(*(arrays[k] for k in datasets.KEYS))


@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_bad_npz_files_say_the_same_with_the_file_named(case, tmp_path):
    arrays, message = BAD[case]
    path = tmp_path / "bad.npz"
    np.savez(path, **arrays)
    with pytest.raises(DistcoreError, match=f"in {path}"):
        datasets.read_npz(path)


def test_files_that_are_not_npz_or_hold_objects_are_refused(tmp_path):
    text = tmp_path / "notes.npz"
    text.write_text("x_train,y_train\n1,2\n")
    with pytest.raises(DistcoreError, match="is not an .npz file"):
        datasets.read_npz(text)
    objects = tmp_path / "objects.npz"
    np.savez(objects, **with_(x_train=np.array([{"a": 1}] * 40, dtype=object)))
    with pytest.raises(DistcoreError, match="cannot read without pickle"):
        datasets.read_npz(objects)
    with pytest.raises(DistcoreError, match="is not a file"):
        datasets.read_npz(tmp_path / "absent.npz")


def test_good_arrays_keep_their_shape_and_count_their_classes(tmp_path):
    path = tmp_path / "mine.npz"
    np.savez(path, **good(classes=3))
    examples = datasets.read_npz(path)
    assert examples.train_images.shape == (40, 8) and examples.classes == 3 and not examples.channel
    summary = {"train_rows": 40, "test_rows": 10, "shape": [8], "classes": 3, "targets": "labels"}
    assert datasets.npz_summary(path) == summary
    assert datasets.Arrays(*good().values()).y_train.dtype == np.int64  # labels as integers
    whole = datasets.Arrays(*with_(y_train=np.arange(40.0) % 3, y_test=np.arange(10.0) % 3).values())
    assert whole.y_train.dtype == np.int64 and whole.examples().classes == 3  # floats of whole numbers: labels


def test_float_targets_that_are_not_class_numbers_are_real_values(tmp_path):
    rng = np.random.default_rng(1)
    for y_train, y_test in [
        (rng.normal(size=40), rng.normal(size=10)),  # a regression
        (rng.normal(size=(40, 2)), rng.normal(size=(10, 2))),  # of two outputs
        (np.arange(40.0) - 20, np.arange(10.0)),  # whole numbers, some below 0: not class numbers
        (rng.normal(size=40), np.arange(10.0)),  # test targets that happen to be whole
    ]:
        arrays = datasets.Arrays(*with_(y_train=y_train, y_test=y_test).values())
        assert arrays.y_train.dtype == arrays.y_test.dtype == np.float32
        assert arrays.examples().classes is None and datasets.real_valued(arrays.examples())
        np.testing.assert_allclose(arrays.y_train, y_train.astype(np.float32))
    path = tmp_path / "targets.npz"
    np.savez(path, **with_(y_train=rng.normal(size=40), y_test=rng.normal(size=10)))
    assert datasets.npz_summary(path)["targets"] == "values" and datasets.npz_summary(path)["classes"] is None
    bad = {
        "an integer split beside real values": (with_(y_train=rng.normal(size=40)), "y_train holds values that are"),
        "shapes that differ": (with_(y_train=rng.normal(size=40), y_test=rng.normal(size=(10, 2))), "targets of"),
        "infinity": (with_(y_train=np.full(40, np.inf), y_test=rng.normal(size=10)), "y_train holds NaN or infinite"),
        "beyond float32": (with_(y_train=rng.normal(size=40) * 1e39, y_test=rng.normal(size=10)), "float32's range"),
    }
    for arrays, message in bad.values():
        with pytest.raises(DistcoreError, match=re.escape(message)):
            datasets.check_arrays(arrays)


def test_a_config_names_its_data_and_refuses_file_sharding_of_arrays(tmp_path):
    assert TrainConfig(devices=("cpu:0",)).data == "fashion-mnist"
    assert TrainConfig(devices=("cpu:0",), data="MNIST").data == "mnist"
    config = TrainConfig(devices=("cpu:0",), data="mine.npz", train_examples=70_000)  # checked when read
    assert config.data == os.path.abspath("mine.npz")
    with pytest.raises(DistcoreError, match="train examples \\(70000\\) must be a whole number from 1 to 60000"):
        TrainConfig(devices=("cpu:0",), train_examples=70_000)
    with pytest.raises(DistcoreError, match="shard policy FILE reads the data from files"):
        TrainConfig(devices=("cpu:0",), data="mine.npz", policy="file")
    with pytest.raises(DistcoreError, match="data \\('mine.csv'\\) must be fashion-mnist, mnist, or the path"):
        TrainConfig(devices=("cpu:0",), data="mine.csv")
    with pytest.raises(DistcoreError, match="the GAN trains the guide's own discriminator and generator"):
        TrainConfig(devices=("cpu:0",), task="gan", learning_rate=0.1)


def test_mnist_says_where_it_looked_and_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras"))
    monkeypatch.setattr(datasets.data_lib, "KERAS_TMP_HOME", tmp_path / "tmp-keras")
    assert not datasets.mnist_available(tmp_path)
    with pytest.raises(DistcoreError, match="MNIST not found .*No Debian or PyPI package ships MNIST"):
        datasets.load_mnist(tmp_path, download=False)
    np.savez(tmp_path / "mnist.npz", **{k: v.astype("uint8") for k, v in good(features=28).items()})
    assert datasets.mnist_available(tmp_path)
    assert datasets.load_mnist(tmp_path).name == "mnist"


def cli(*args, cwd):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "distcore", *args], cwd=cwd, capture_output=True, text=True, timeout=300, env=env
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "case",
    ["a missing key", "a negative label", "text"],  # each starts TensorFlow; the rest are checked above
)
def test_the_cli_refuses_bad_data_before_it_writes_anything(case, tmp_path):
    arrays, message = BAD[case]
    np.savez(tmp_path / "bad.npz", **arrays)
    run_dir = tmp_path / "runs" / "r"
    done = cli("train", "--data", "bad.npz", "--run-dir", str(run_dir), "--max-steps", "2", "--json", cwd=tmp_path)
    assert done.returncode == 2
    error = json.loads(done.stdout.splitlines()[-1])["error"]
    assert message in error.replace(f" in {tmp_path / 'bad.npz'}", "")
    assert not run_dir.exists() or not any(run_dir.iterdir())  # nothing written
