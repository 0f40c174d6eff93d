import gzip
import os
import shutil

import numpy as np
import pytest

from distcore import data
from distcore.config import DistcoreError


def test_real_fashion_mnist_is_read_and_checked(fmnist):
    assert fmnist.train_images.shape == (60000, 28, 28) and fmnist.train_images.dtype == np.uint8
    assert fmnist.test_images.shape == (10000, 28, 28)
    assert set(np.unique(fmnist.train_labels)) == set(range(10))
    # Balanced classes, 6000 each: a property of the real data a fake would not have.
    assert np.bincount(fmnist.train_labels).tolist() == [6000] * 10
    assert 60 < fmnist.train_images.mean() < 80


def copy_data(fmnist, folder):
    folder.mkdir(parents=True, exist_ok=True)
    for name in data.FILES.values():
        shutil.copy(data.Path(fmnist.source) / name, folder / name)
    return folder


def test_explicit_folder_wins(fmnist, tmp_path):
    folder = copy_data(fmnist, tmp_path / "mine")
    assert data.load(folder).source == str(folder)


def test_missing_data_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras"))
    monkeypatch.setattr(data, "DEBIAN_DIR", tmp_path / "debian")
    monkeypatch.delenv("DISTCORE_DATA_DIR", raising=False)
    with pytest.raises(DistcoreError) as err:
        data.load(download=False)
    message = str(err.value)
    assert "keras" in message and "debian" in message  # where it looked
    assert "apt-get install dataset-fashion-mnist" in message and "--data-dir" in message


def test_search_order_keras_cache_before_debian(fmnist, tmp_path, monkeypatch):
    # Keras's cache as Keras finds it: under $KERAS_HOME when set, not only ~/.keras.
    cache = copy_data(fmnist, tmp_path / "kh" / "datasets" / "fashion-mnist")
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "kh"))
    monkeypatch.delenv("DISTCORE_DATA_DIR", raising=False)
    assert data.load().source == str(cache)


def test_a_download_keras_kept_in_tmp_is_found(fmnist, tmp_path, monkeypatch):
    # Keras downloads to /tmp/.keras when it cannot write to its home (a container's user with
    # no home); the loader looked in ~/.keras only and said "not found" after a good download.
    import keras

    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "unwritable"))
    monkeypatch.setattr(data, "KERAS_TMP_HOME", tmp_path / "tmp-keras")
    monkeypatch.setattr(data, "DEBIAN_DIR", tmp_path / "debian")
    monkeypatch.delenv("DISTCORE_DATA_DIR", raising=False)
    fetched = tmp_path / "tmp-keras" / "datasets" / "fashion-mnist"
    monkeypatch.setattr(keras.datasets.fashion_mnist, "load_data", lambda: copy_data(fmnist, fetched))
    assert data.locate(download=True) == fetched


def test_a_user_with_no_home_finds_the_debian_files_and_gets_a_cache_folder(monkeypatch):
    # `env -i` or `--user 12345` (no $HOME, no passwd entry): Path.home() raises "Could not determine
    # home directory.", yet training finds the Debian files, with no traceback.
    import pwd

    from distcore import inputs

    def no_entry(uid):
        raise KeyError(uid)

    monkeypatch.delenv("HOME", raising=False)
    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    for name in ("KERAS_HOME", "DISTCORE_DATA_DIR", "DISTCORE_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)
    assert data.home_folder() is None
    assert data.locate(download=False) == data.DEBIAN_DIR
    assert inputs.cache_root().name == f"distcore-cache-{os.getuid()}"


def test_an_explicit_folder_missing_files_is_an_error_not_a_fallback(tmp_path, monkeypatch):
    with pytest.raises(DistcoreError, match=r"^--data-dir \(data_dir=\) .* lacks train-images"):
        data.load(tmp_path)
    (tmp_path / "a-file").write_text("")  # called a file, not said to "lack" the four files
    with pytest.raises(DistcoreError, match="a-file is a file, not a folder: name the folder that holds train-images"):
        data.load(tmp_path / "a-file")
    # The variable too: a mistyped one trained on Debian's copy without a word.
    monkeypatch.setenv("DISTCORE_DATA_DIR", str(tmp_path))
    with pytest.raises(DistcoreError, match=rf"^\$DISTCORE_DATA_DIR {tmp_path} lacks train-images"):
        data.locate()


def test_a_runs_saved_folder_that_is_gone_falls_back_to_the_usual_places_and_says_so(fmnist, tmp_path, monkeypatch):
    # A run copied from a colleague names their --data-dir; the app, with no data folder field,
    # can still evaluate and resume it when this machine has the data.
    monkeypatch.delenv("DISTCORE_DATA_DIR", raising=False)
    gone, config_json, notes = tmp_path / "theirs", tmp_path / "run" / "config.json", []
    found = data.locate(str(gone), saved_in=config_json, on_note=notes.append)
    assert found == data.locate() and has_four_files(found)
    assert notes == [
        f"the run's data folder {gone} (its data_dir in {config_json}) lacks {', '.join(data.FILES.values())}; "
        f"read Fashion-MNIST from {found} instead."
    ]
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras"))  # and no data here either
    monkeypatch.setattr(data, "DEBIAN_DIR", tmp_path / "debian")
    with pytest.raises(DistcoreError) as err:
        data.locate(str(gone), download=False, saved_in=config_json)
    assert str(err.value).startswith(f"the run's data folder {gone} (its data_dir in {config_json}) lacks ")
    assert ", and Fashion-MNIST not found (looked in: " in str(err.value) and "apt-get install" in str(err.value)


def has_four_files(folder):
    return all((folder / name).is_file() for name in data.FILES.values())


def test_truncated_file_is_refused(fmnist, tmp_path):
    folder = copy_data(fmnist, tmp_path / "bad")
    raw = gzip.open(folder / data.FILES["test_images"]).read()
    with gzip.open(folder / data.FILES["test_images"], "wb") as f:
        f.write(raw[: len(raw) // 2])
    with pytest.raises(DistcoreError, match="truncated"):
        data.load(folder)


def test_foreign_file_is_refused(fmnist, tmp_path):
    folder = copy_data(fmnist, tmp_path / "bad")
    (folder / data.FILES["train_labels"]).write_bytes(b"not gzip at all")
    with pytest.raises(DistcoreError, match="not a readable gzip"):
        data.load(folder)
    with gzip.open(folder / data.FILES["train_labels"], "wb") as f:
        f.write(gzip.open(folder / data.FILES["test_labels"]).read())  # right kind, wrong size
    with pytest.raises(DistcoreError, match="expected 2049"):
        data.load(folder)
