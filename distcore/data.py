"""Fashion-MNIST (and MNIST) from the original IDX files, as uint8 numpy arrays (no TensorFlow here).

Where it looks, in order:
  1. an explicit directory (`data_dir` / `--data-dir`, or `$DISTCORE_DATA_DIR`);
  2. Keras's cache, `$KERAS_HOME/datasets/fashion-mnist` (`KERAS_HOME` defaults to `~/.keras`);
  3. `/usr/share/datasets/fashion-mnist` (Debian's package `dataset-fashion-mnist`);
  4. Keras's own download (`keras.datasets.fashion_mnist.load_data()`), unless
     `download=False` or `$DISTCORE_NO_DOWNLOAD=1`.
Each candidate must hold all four files; what is read is checked (magic numbers,
shapes, label range) so a truncated or foreign file fails loudly.
"""

from __future__ import annotations

import dataclasses
import gzip
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import settings
from .config import DistcoreError

FILES = {
    "train_images": "train-images-idx3-ubyte.gz",
    "train_labels": "train-labels-idx1-ubyte.gz",
    "test_images": "t10k-images-idx3-ubyte.gz",
    "test_labels": "t10k-labels-idx1-ubyte.gz",
}
SIZES = {"train": 60_000, "test": 10_000}
CLASS_NAMES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
KERAS_TMP_HOME = Path("/tmp/.keras")  # Keras's when it cannot write to $KERAS_HOME
DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")
HOW_TO_GET = (
    "Get the data one of these ways: `sudo apt-get install dataset-fashion-mnist` (Debian/Ubuntu, "
    f"installs to {DEBIAN_DIR}); or, with internet, run "
    '`python -c "import keras; keras.datasets.fashion_mnist.load_data()"` (fills '
    "$KERAS_HOME/datasets/fashion-mnist; KERAS_HOME defaults to ~/.keras); or download the four *-ubyte.gz files from "
    "github.com/zalandoresearch/fashion-mnist into a folder and name it with --data-dir FOLDER "
    "(data_dir=FOLDER in Python; the app reads $DISTCORE_DATA_DIR)."
)


@dataclass(frozen=True, eq=False)
class Examples:
    """A training and a test split as numpy arrays, with what the pipeline needs to know of them.

    Fashion-MNIST's: images (N, 28, 28) uint8, labels (N,) uint8 of 10 classes. `channel`: the
    images get a channel axis in the pipeline (the built-in datasets; a user's arrays keep their shape).
    """

    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray
    source: str
    name: str = "fashion-mnist"
    classes: int = 10
    channel: bool = True

    def transform_x(self, x):
        """Examples as training's pipeline hands them to the model (a TensorFlow tensor)."""
        from .inputs import transform_for

        return transform_for(self)(x, np.zeros(len(x), np.int32))[0]


FashionMNIST = Examples  # the name of the one dataset distcore first trained on


def home_folder() -> Path | None:
    """The user's home; None for a user with none (no $HOME and no passwd entry, as `env -i`
    or a container's `--user 12345` gives), where Path.home() raises: training then still
    finds the Debian files, with no traceback."""
    try:
        return Path.home()
    except RuntimeError:
        return None


def keras_caches() -> list[Path]:
    """Where keras.datasets.fashion_mnist.load_data() keeps the files: under $KERAS_HOME
    (default ~/.keras), or under /tmp/.keras when Keras cannot write there, as for a
    container's user with no home (keras.utils.get_file). Both are looked in."""
    home = home_folder()
    keras_home = settings.get("KERAS_HOME") or (home / ".keras" if home else None)
    own = [Path(keras_home).expanduser() / "datasets" / "fashion-mnist"] if keras_home else []
    return own + [KERAS_TMP_HOME / "datasets" / "fashion-mnist"]


def candidate_dirs(data_dir=None) -> list[Path]:
    explicit = data_dir or settings.get("DISTCORE_DATA_DIR")
    dirs = [Path(explicit).expanduser()] if explicit else []
    return dirs + keras_caches()[:-1] + [DEBIAN_DIR]  # (Keras's /tmp one only after a download)


def read_idx(path: Path, magic: int, shape: tuple[int, ...]) -> np.ndarray:
    """Read one gzipped IDX file and check its header against what Fashion-MNIST has."""
    try:
        with gzip.open(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError) as err:
        raise DistcoreError(f"{path} is not a readable gzip file ({err}). {HOW_TO_GET}") from None
    ndim = len(shape)
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DistcoreError(f"{path} is too short to be an IDX file. {HOW_TO_GET}")
    found_magic = int.from_bytes(raw[:4], "big")
    dims = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    if found_magic != magic or dims != shape:
        raise DistcoreError(
            f"{path} has header {found_magic} {dims}, expected {magic} {shape}: "
            f"not the Fashion-MNIST file. {HOW_TO_GET}"
        )
    body = np.frombuffer(raw, dtype=np.uint8, offset=header)
    if body.size != int(np.prod(shape)):
        raise DistcoreError(f"{path} is truncated ({body.size} of {int(np.prod(shape))} bytes). {HOW_TO_GET}")
    return body.reshape(shape)


def read_dir(folder: Path, name: str = "fashion-mnist") -> Examples:
    arrays = {}
    for key, filename in FILES.items():
        split = key.split("_")[0]
        n = SIZES[split]
        if key.endswith("images"):
            arrays[key] = read_idx(folder / filename, 2051, (n, 28, 28))
        else:
            arrays[key] = read_idx(folder / filename, 2049, (n,))
            if arrays[key].max() > 9:
                raise DistcoreError(f"{folder / filename} has labels above 9: the file is damaged. {HOW_TO_GET}")
    return Examples(**arrays, source=str(folder), name=name)


def has_files(folder: Path) -> bool:
    return all((folder / name).is_file() for name in FILES.values())


def missing_files(folder: Path) -> str:
    return ", ".join(name for name in FILES.values() if not (folder / name).is_file())


def load(data_dir=None, download: bool | None = None, saved_in=None, on_note=None) -> Examples:
    """Load Fashion-MNIST from the first place that has it (see the module docstring)."""
    return read_dir(locate(data_dir, download, saved_in, on_note))


def locate(data_dir=None, download: bool | None = None, saved_in=None, on_note=None) -> Path:
    """The first folder that has the four files (downloading them with Keras when allowed),
    without reading them; the error says how to get the data.

    `saved_in`: the run's config.json, when `data_dir` came from there and not from a
    --data-dir flag. That folder may be another host's, or gone: then the usual places are
    searched instead, and `on_note` is told which folder was read. (A run copied to a
    colleague can so be evaluated or resumed in the app, which has no data folder field.)
    """
    if saved_in and data_dir and not has_files(Path(data_dir).expanduser()):
        lacking = (
            f"the run's data folder {data_dir} (its data_dir in {saved_in}) lacks "
            f"{missing_files(Path(data_dir).expanduser())}"
        )
        try:
            found = locate(None, download)
        except DistcoreError as err:
            raise DistcoreError(f"{lacking}, and {err}") from None
        if on_note:
            on_note(f"{lacking}; read Fashion-MNIST from {found} instead.")
        return found
    tried = []
    for folder in candidate_dirs(data_dir):
        if has_files(folder):
            return folder
        tried.append(str(folder))
        named = data_dir or settings.get("DISTCORE_DATA_DIR")  # a folder asked for is not passed over
        if named and folder == Path(named).expanduser():
            # named as given (data_dir= or --data-dir), and a file called a file, not said to "lack" them
            what = "is a file, not a folder: name the folder that holds" if folder.is_file() else "lacks"
            raise DistcoreError(
                f"{'--data-dir (data_dir=)' if data_dir else '$DISTCORE_DATA_DIR'} {folder} {what} "
                f"{missing_files(folder)}. {HOW_TO_GET}"
            )
    if keras_download("fashion_mnist", download, tried):
        caches = keras_caches()
        kept = [folder for folder in caches if has_files(folder)]
        if kept:
            return kept[0]
        tried.append(f"Keras download (done, but its files are in neither {' nor '.join(map(str, caches))})")
    raise DistcoreError(f"Fashion-MNIST not found (looked in: {'; '.join(tried)}). {HOW_TO_GET}")


def keras_download(dataset: str, download: bool | None, tried: list[str]) -> bool:
    """Fill Keras's cache with `keras.datasets.<dataset>.load_data()` where downloads are allowed
    (`download`; None: unless $DISTCORE_NO_DOWNLOAD is set). False when they are not, or when it
    failed, its reason then added to `tried`."""
    if download is None:
        download = settings.get("DISTCORE_NO_DOWNLOAD") in ("", "0")
    if not download:
        return False
    try:
        import keras

        getattr(keras.datasets, dataset).load_data()
    except Exception as err:  # no network, proxy, disk: all the same to the user
        tried.append(f"Keras download ({type(err).__name__}: {err})")
        return False
    return True


def subset(data: Examples, train_examples: int, test_examples: int) -> Examples:
    """The first N examples of each split: deterministic, so runs can be compared."""
    for split, asked, rows in (("train", train_examples, data.train_labels), ("test", test_examples, data.test_labels)):
        if asked > len(rows):
            raise DistcoreError(
                f"{split} examples ({asked}) is more than the data's {len(rows)} {split} rows ({data.source}): "
                f"choose at most {len(rows)}."
            )
    return dataclasses.replace(
        data,
        train_images=data.train_images[:train_examples],
        train_labels=data.train_labels[:train_examples],
        test_images=data.test_images[:test_examples],
        test_labels=data.test_labels[:test_examples],
    )
