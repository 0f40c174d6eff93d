"""Where a run's examples come from: Fashion-MNIST, MNIST, or the user's own arrays.

A run's config.json names its data (`TrainConfig.data`):
  "fashion-mnist"  the default (data.py finds the files);
  "mnist"          no Debian or PyPI package ships MNIST's files (the PyPI packages named mnist,
                   python-mnist and emnist download them), so it is read from Keras's cache
                   (`keras.datasets.mnist.load_data()` writes $KERAS_HOME/datasets/mnist.npz), from
                   a folder given as data_dir (mnist.npz, or the four IDX .gz files), or downloaded
                   by Keras where the machine has internet;
  "arrays"         the run folder's data.npz, written when a library caller trains on `Arrays`;
  "datasets"       a library caller's `Datasets`: tf.data pipelines made by the caller's functions,
                   for data that does not fit in memory (this process only: pass them again to
                   resume or evaluate);
  a path to .npz   a file with arrays x_train, y_train, x_test, y_test (the app's uploads too);
                   a new run keeps a copy as its data.npz, which resume and evaluation read.

User arrays are checked before anything trains (`check_arrays`): every message says what is
wrong and what is allowed. No TensorFlow here.
"""

from __future__ import annotations

import os
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import data as data_lib
from .config import DistcoreError
from .data import Examples

KEYS = ("x_train", "y_train", "x_test", "y_test")
BUILT_IN = ("fashion-mnist", "mnist")
ARRAYS = "arrays"  # the run folder's own copy of a library caller's arrays
DATASETS = "datasets"  # a library caller's Datasets, which only its own process has
RUN_DATA_FILE = "data.npz"
MAX_CLASSES = 100_000
MNIST_NPZ = "mnist.npz"


@dataclass(frozen=True, eq=False)
class Arrays:
    """Your own data as numpy arrays: `Arrays(x_train, y_train, x_test, y_test)`.

    x: one row per example, any shape after the first axis (the same in both splits), numbers;
    uint8 is scaled to [0, 1] as images are, other types are cast to float32 as they are.
    y: integer class labels 0..classes-1, one per row (floats that are all whole numbers count as
    labels); or, for a task of your own such as a regression, real-valued targets: floats, any shape
    after the first axis, in both splits. Checked here, with a message that says what is wrong
    (`DistcoreError`)."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray

    def __post_init__(self):
        checked = check_arrays(dict(zip(KEYS, (self.x_train, self.y_train, self.x_test, self.y_test))))
        for key in KEYS:
            object.__setattr__(self, key, checked[key])

    def examples(self, source: str = "arrays") -> Examples:
        return to_examples({k: getattr(self, k) for k in KEYS}, source)

    def save(self, path: Path) -> None:
        """Write the arrays as an .npz (uncompressed: read back by memory, fast)."""
        tmp = path.with_name(path.name + ".tmp.npz")
        np.savez(tmp, **{k: getattr(self, k) for k in KEYS})
        os.replace(tmp, path)


@dataclass(frozen=True, eq=False)
class Datasets:
    """Data that does not fit in memory, as `tf.data` pipelines your functions make:

        Datasets(train=lambda epoch, seed: ..., test=lambda: ..., train_examples=N, test_examples=M)

    `train(epoch, seed)` returns the unbatched (x, y) examples of that epoch (0-based), in an order
    that depends on nothing else, so a resumed run skips exactly the batches it trained; `test()`
    the unbatched test examples. distcore takes the first `train_examples` and `test_examples`,
    batches them by the global batch, distributes them, and maps them as it does arrays (uint8
    scaled to [0, 1], the rest cast to float32; integer y to int32, float y to float32). `classes`:
    the number of classes, for the model check (None: not checked)."""

    train: object
    test: object
    train_examples: int
    test_examples: int
    classes: int | None = None
    source: str = "datasets"
    name: str = DATASETS
    channel: bool = False

    def __post_init__(self):
        from .config import check_int

        if not callable(self.train) or not callable(self.test):
            raise DistcoreError(
                "Datasets(train=..., test=...) takes two functions: train(epoch, seed) and test(), each "
                "returning an unbatched tf.data.Dataset of (x, y)."
            )
        object.__setattr__(self, "train_examples", check_int("train_examples", self.train_examples, high=10**12))
        object.__setattr__(self, "test_examples", check_int("test_examples", self.test_examples, high=10**12))

    def first(self):
        """One training example, as numpy (x, y), for checks."""
        return first_example(lambda: self.train(0, 0), "train(epoch, seed)")

    def check(self) -> None:
        """Both functions' datasets, checked on their first example before anything trains: each
        an unbatched dataset of numeric (x, y) pairs, x of one shape in both splits."""
        train_x, _ = self.first()
        test_x, _ = first_example(self.test, "test()")
        if train_x.shape[1:] != test_x.shape[1:]:
            raise DistcoreError(
                f"Datasets.train gives x of shape {train_x.shape[1:]} but test of {test_x.shape[1:]}: both "
                "splits must have the same shape, one example an element (unbatched: distcore batches them)."
            )

    def transform_x(self, x):
        from .inputs import scale_and_cast

        return scale_and_cast(x, np.zeros(len(x), np.int32))[0]


def first_example(make, call: str):
    """The first (x, y) of the dataset `make()` returns, as numpy arrays of one row; DistcoreError
    saying what the function must return when it is not an unbatched dataset of numeric pairs."""
    import tensorflow as tf

    from .config import error_line

    what = f"Datasets.{call.split('(')[0]}"
    try:
        dataset = make()
    except TypeError as err:  # most often the wrong arguments: lambda: ... for train
        raise DistcoreError(f"{what} failed ({error_line(err)}): give a function {call}.") from None
    if not isinstance(dataset, tf.data.Dataset):
        raise DistcoreError(f"{what} returned {type(dataset).__name__}: it must return a tf.data.Dataset of (x, y).")
    spec = dataset.element_spec
    if not (isinstance(spec, tuple) and len(spec) == 2 and all(isinstance(s, tf.TensorSpec) for s in spec)):
        raise DistcoreError(
            f"{what}'s dataset gives elements of {spec}: each must be one example as a pair (x, y), "
            "e.g. tf.data.Dataset.from_tensor_slices((x, y))."
        )
    for name, part in zip(("x", "y"), spec):
        if not (part.dtype.is_floating or part.dtype.is_integer or part.dtype == tf.bool):
            raise DistcoreError(f"{what}'s {name} holds {part.dtype.name} values: it must hold numbers.")
    for x, y in dataset.take(1):
        return x.numpy()[None], y.numpy()[None]
    raise DistcoreError(f"{what} gave no example: each split needs at least one.")


def check_arrays(arrays: dict, where: str = "") -> dict:
    """The four arrays, checked and as plain numpy arrays: y as int64 class labels when both
    splits' y are class numbers (integers, or floats that are all whole numbers from 0 up), else
    as float32 real values (a regression's targets: floats, in both splits)."""
    at = f" in {where}" if where else ""
    missing = [k for k in KEYS if k not in arrays]
    if missing:
        found = ", ".join(sorted(arrays)) or "none"
        raise DistcoreError(f"the data{at} has no {', '.join(missing)}: it needs {', '.join(KEYS)} (found: {found}).")
    out = {}
    for key in KEYS:
        value = arrays[key]
        try:
            array = np.asarray(value)
        except Exception as err:
            raise DistcoreError(f"{key}{at} is not an array ({type(err).__name__}).") from None
        if array.dtype.kind not in "buif":
            raise DistcoreError(
                f"{key}{at} holds {array.dtype} values: it must hold numbers (integers or floats), not text or objects."
            )
        out[key] = array
    for split in ("train", "test"):
        x, y = out[f"x_{split}"], out[f"y_{split}"]
        if x.ndim < 2:
            raise DistcoreError(
                f"x_{split}{at} has shape {x.shape}: it must have one row per example, (examples, features...); "
                f"a single feature per example is x[:, None]."
            )
        if y.ndim == 0:
            raise DistcoreError(f"y_{split}{at} is a single number: it must hold one label or target per example.")
        if len(x) == 0:
            raise DistcoreError(f"x_{split}{at} is empty: each split needs at least one example.")
        if len(x) != len(y):
            raise DistcoreError(
                f"x_{split}{at} has {len(x)} rows but y_{split} has {len(y)}: they must have one label per example."
            )
        for key, array in ((f"x_{split}", x), (f"y_{split}", y)):
            if array.dtype.kind == "f" and not np.isfinite(array).all():
                raise DistcoreError(f"{key}{at} holds NaN or infinite values: every value must be a finite number.")
            if array.dtype.kind == "f" and np.abs(array).max() > np.finfo(np.float32).max:  # float32 in training
                raise DistcoreError(f"{key}{at} holds values beyond float32's range (±3.4e38), which training uses.")
    ys = [out["y_train"], out["y_test"]]
    if all(y.dtype.kind == "f" for y in ys) and not all(are_class_numbers(y) for y in ys):
        for split in ("train", "test"):  # a regression's targets
            out[f"y_{split}"] = out[f"y_{split}"].astype(np.float32)
    else:
        for split in ("train", "test"):
            out[f"y_{split}"] = checked_labels(out[f"y_{split}"], f"y_{split}{at}")
        if out["y_test"].max() > out["y_train"].max():
            raise DistcoreError(
                f"y_test{at} holds class {int(out['y_test'].max())}, which y_train never has "
                f"(its labels go up to {int(out['y_train'].max())}): the model could not learn it."
            )
    if out["x_train"].shape[1:] != out["x_test"].shape[1:]:
        raise DistcoreError(
            f"x_train{at} has examples of shape {out['x_train'].shape[1:]} but x_test of "
            f"{out['x_test'].shape[1:]}: both splits must have the same shape after the first axis."
        )
    if out["y_train"].shape[1:] != out["y_test"].shape[1:]:
        raise DistcoreError(
            f"y_train{at} has targets of shape {out['y_train'].shape[1:]} but y_test of "
            f"{out['y_test'].shape[1:]}: both splits must have the same shape after the first axis."
        )
    return out


def are_class_numbers(y: np.ndarray) -> bool:
    """Whole numbers from 0 to MAX_CLASSES - 1, one per example (a column of them too)."""
    return (y.ndim == 1 or y.shape[1:] == (1,)) and bool(((y == np.round(y)) & (y >= 0) & (y < MAX_CLASSES)).all())


def checked_labels(y: np.ndarray, name: str) -> np.ndarray:
    """One class number per example, as int64; DistcoreError naming what is wrong."""
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1:
        raise DistcoreError(
            f"{name} has shape {y.shape}: it must hold one integer class label per example, "
            "(examples,); one-hot labels are y.argmax(axis=1). Real-valued targets are floats, in both splits."
        )
    if y.dtype.kind == "f" and not (y == np.round(y)).all():
        raise DistcoreError(
            f"{name} holds values that are not whole numbers, but the other split's labels are class numbers: "
            "give both splits class numbers, or both real-valued targets (floats)."
        )
    y = y.astype(np.int64)
    if y.min() < 0:
        raise DistcoreError(
            f"{name} holds {int(y.min())}: labels must be class numbers from 0 up (real-valued targets: give y "
            "as floats)."
        )
    if y.max() >= MAX_CLASSES:
        raise DistcoreError(f"{name} holds {int(y.max())}: labels must be below {MAX_CLASSES}.")
    return y


def real_valued(examples) -> bool:
    """True when the examples' y are real values (a regression's targets), not class labels: y of
    floats (arrays keep class numbers as integers; a `Datasets` pipeline's y reach a step as they
    are typed)."""
    y = examples.first()[1] if hasattr(examples, "first") else examples.train_labels
    return np.asarray(y).dtype.kind == "f"


def to_examples(arrays: dict, source: str) -> Examples:
    labels = arrays["y_train"].dtype.kind != "f"
    classes = int(arrays["y_train"].max()) + 1 if labels else None
    return Examples(
        arrays["x_train"],
        arrays["y_train"],
        arrays["x_test"],
        arrays["y_test"],
        source=source,
        name="arrays",
        classes=classes,
        channel=False,
    )


def read_npz(path) -> Examples:
    """An .npz of x_train, y_train, x_test, y_test, checked (no pickled objects are read)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise DistcoreError(f"{path} is not a file: give an .npz with {', '.join(KEYS)}.")
    if not zipfile.is_zipfile(path):
        raise DistcoreError(
            f"{path} is not an .npz file (numpy.savez writes one): save your arrays with "
            f"np.savez(path, {', '.join(f'{k}={k}' for k in KEYS)})."
        )
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {key: npz[key] for key in npz.files}
    except ValueError as err:  # an object array needs pickle, which is never read
        raise DistcoreError(
            f"{path} holds arrays numpy cannot read without pickle ({err}): save numbers only."
        ) from None
    except (OSError, zipfile.BadZipFile, EOFError) as err:
        raise DistcoreError(f"{path} cannot be read as an .npz file ({err}).") from None
    return to_examples(check_arrays(arrays, where=str(path)), str(path))


def npz_summary(path) -> dict:
    """Rows, example shape, classes and kind of targets of an .npz, for the app to show (reads and
    checks it)."""
    found = read_npz(path)
    return {
        "train_rows": len(found.train_labels),
        "test_rows": len(found.test_labels),
        "shape": list(found.train_images.shape[1:]),
        "classes": found.classes,
        "targets": "values" if real_valued(found) else "labels",
    }


def mnist_candidates(data_dir=None) -> list[Path]:
    """Where MNIST may be: the folder given, Keras's cache (its mnist.npz), Keras's /tmp cache."""
    explicit = [Path(data_dir).expanduser()] if data_dir else []
    caches = [folder.parent for folder in data_lib.keras_caches()]  # .../datasets
    return explicit + caches


def load_mnist(data_dir=None, download: bool | None = None) -> Examples:
    tried = []
    for folder in mnist_candidates(data_dir):
        if (folder / MNIST_NPZ).is_file():
            return mnist_from_npz(folder / MNIST_NPZ)
        if data_lib.has_files(folder):
            return data_lib.read_dir(folder, name="mnist")
        tried.append(str(folder))
    if data_lib.keras_download("mnist", download, tried):
        for folder in mnist_candidates():
            if (folder / MNIST_NPZ).is_file():
                return mnist_from_npz(folder / MNIST_NPZ)
    raise DistcoreError(
        f"MNIST not found (looked in: {'; '.join(tried)}). No Debian or PyPI package ships MNIST's files: "
        'with internet, run `python -c "import keras; keras.datasets.mnist.load_data()"` (it fills Keras\'s '
        "cache), or put mnist.npz or the four MNIST .gz files in a folder and give it as --data-dir."
    )


def mnist_from_npz(path: Path) -> Examples:
    with np.load(path, allow_pickle=False) as npz:
        arrays = {key: npz[key] for key in KEYS}
    return Examples(
        arrays["x_train"], arrays["y_train"], arrays["x_test"], arrays["y_test"], source=str(path), name="mnist"
    )


def mnist_available(data_dir=None) -> bool:
    """True when MNIST can be read without a download (the app offers it then)."""
    return any((folder / MNIST_NPZ).is_file() or data_lib.has_files(folder) for folder in mnist_candidates(data_dir))


def load(name: str, *, data_dir=None, run_dir=None, saved_in=None, on_note=None) -> Examples:
    """The examples a run's `data` names (see the module docstring)."""
    if name == "fashion-mnist":
        return data_lib.load(data_dir, saved_in=saved_in, on_note=on_note)
    if name == "mnist":
        return load_mnist(data_dir)
    if name == DATASETS:
        raise DistcoreError(
            "the run trained on Datasets made by a notebook's or script's functions, which only that process "
            "has: pass them again (data=Datasets(...))."
        )
    if name == ARRAYS:
        if run_dir is None:
            raise DistcoreError("the run's data are arrays kept in its folder: name the run folder.")
        path = Path(run_dir) / RUN_DATA_FILE
        if not path.is_file():
            raise DistcoreError(
                f"the run's arrays ({path}) are gone: train it again with distcore.train(..., Arrays(...))."
            )
        found = read_npz(path)
        return found
    kept = Path(run_dir) / RUN_DATA_FILE if run_dir is not None else None
    return read_npz(kept if kept is not None and kept.is_file() else name)


def keep_copy(name: str, run_dir) -> None:
    """A new run on an .npz file (`data` a path) keeps a copy of it in its folder, as a run on
    `Arrays` keeps its arrays: resume and evaluation read that copy (`load`), so the run's numbers
    hold when the file is changed or moved."""
    if name in (*BUILT_IN, ARRAYS, DATASETS):
        return
    path = Path(run_dir) / RUN_DATA_FILE
    tmp = path.with_name(path.name + ".tmp")
    shutil.copyfile(Path(name).expanduser(), tmp)
    os.replace(tmp, path)


def train_rows(name: str, *, data_dir=None, run_dir=None) -> tuple[int, int]:
    """(training rows, test rows) of a data source, for defaults and checks."""
    if name in BUILT_IN:
        return 60_000, 10_000
    found = load(name, data_dir=data_dir, run_dir=run_dir)
    return len(found.train_labels), len(found.test_labels)
