"""Configuration: frozen dataclasses, validated in one place.

Every error a user can cause is a `DistcoreError` whose message says what is
wrong and what is allowed. The CLI prints it and exits 2; the app shows it.
This module does not import TensorFlow.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

POLICIES = ("auto", "file", "data", "off")
APIS = ("dataset", "function")
MODELS = ("cnn", "mlp")
TASKS = ("classifier", "gan")
DATASETS = ("fashion-mnist", "mnist")
REFERENCE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")  # module:function, as uvicorn takes an app
MAX_EXAMPLES = 10**9
OPTIMIZERS = ("adam", "sgd")
MAX_LOGICAL_CPUS = 16
MAX_GLOBAL_BATCH = 65536
MAX_SPLIT_EXAMPLES = 100_000
MAX_SPLIT_STEPS = 2_000  # a plan is for looking at: more steps than this nobody reads
TRAIN_SIZE = 60_000
TEST_SIZE = 10_000
MAX_SEED = 2**31 - 1  # training's seeds; loss-check and split take the same


class DistcoreError(Exception):
    """An error the user caused; the message is for people, not a traceback."""

    # Raised inside a traced function (a check of what a task's step returns), it reaches the
    # caller as it is: autograph passes such errors through rather than prefix "in user code:".
    ag_pass_through = True


NODE_NAME = re.compile(r"\{\{function_node [^}]*\}\}\s*")


def without_node_names(text: str) -> str:
    """TensorFlow's error text without the `{{function_node __wrapped__..._device_/job:...}}`
    names of the ops that raised it, which say nothing to people."""
    return NODE_NAME.sub("", text)


def error_line(err: BaseException) -> str:
    """An error in one line for people. A TensorFlow op error that a tf.function raised opens with
    "Graph execution error:" and the Python stack that built the op; its reason comes after them.
    An error a step's code raised while it was traced opens with autograph's "in user code:" and
    that code's stack; a Keras layer's, with "Exception encountered when calling": the reason
    comes after them too."""
    if isinstance(err, DistcoreError):
        return str(err)
    # The detail keeps node names and Keras's bold type (ANSI escapes): the line does not.
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", without_node_names(line)).strip() for line in str(err).splitlines()]
    kind, at = type(err).__name__, 0
    if lines and lines[0] == "in user code:":  # autograph's: the code's stack, then the error it raised
        raised = [i for i, line in enumerate(lines) if re.match(r"[A-Za-z_][\w.]*(Error|Exception): ", line)]
        if raised:
            at = raised[-1]
            kind, lines[at] = lines[at].split(": ", 1)
    if lines[at:] and lines[at].startswith("Exception encountered when calling"):  # Keras's: the reason follows
        reason = next((line for line in lines[at + 1 :] if line and not line.startswith("Arguments received")), "")
        return f"{kind}: {reason or lines[at]}"
    if at:
        return f"{kind}: {lines[at]}"
    reasons = [
        line
        for line in lines
        if line and line != "Graph execution error:" and not line.startswith(("Detected at node", 'File "'))
    ]
    return f"{type(err).__name__}: {(reasons or [''])[0]}".rstrip(": ")


_NAME = re.compile(r"^\s*/?(?:device:)?(cpu|gpu):(\d+)\s*$", re.IGNORECASE)


def parse_device_list(text) -> tuple[str, ...]:
    """'cpu:0, CPU:1' -> ('cpu:0', 'cpu:1'); rejects empty, malformed and duplicate names.
    Any sequence of names will do (a numpy array of them too); one string is a list of names."""
    if text is None or isinstance(text, str):
        items = (text or "").split(",")
    elif isinstance(text, Iterable) and not isinstance(text, (bytes, bytearray, Mapping)):
        items = list(text)  # not `text or ""`, which asks a numpy array for its truth value
    else:
        raise DistcoreError(
            f"devices ({text!r}) must be device names, as a list such as ['cpu:0', 'cpu:1'] "
            "or as text such as cpu:0,cpu:1."
        )
    items = [str(item).strip() for item in items if str(item).strip()]
    if not items:
        raise DistcoreError("the device set is empty: name at least one device, e.g. cpu:0,cpu:1.")
    names = []
    for item in items:
        match = _NAME.match(item)
        if not match:
            raise DistcoreError(f"unknown device name {item!r}: write devices as cpu:N or gpu:N.")
        name = f"{match.group(1).lower()}:{int(match.group(2))}"
        if name in names:
            raise DistcoreError(f"device {name} is listed twice: each device can hold one replica.")
        names.append(name)
    kinds = {name.split(":")[0] for name in names}
    if len(kinds) > 1:
        raise DistcoreError("mix of CPU and GPU devices: MirroredStrategy needs one kind; choose CPUs or GPUs.")
    return tuple(names)


def device_set(devices, gpus: int | None = None) -> tuple[str, ...]:
    """Device names as parse_device_list reads them, each one a device that can exist:
    cpu:N below MAX_LOGICAL_CPUS, gpu:N below `gpus` when that is known (counting GPUs
    needs TensorFlow; devices.prepare checks them when the process sets up)."""
    names = parse_device_list(devices)
    for name in names:
        kind, index = name.split(":")
        limit = MAX_LOGICAL_CPUS if kind == "cpu" else gpus
        if limit is not None and int(index) >= limit:
            raise DistcoreError(f"device {name} does not exist; available: {describe_devices(gpus or 0)}.")
    return names


def describe_devices(gpus: int) -> str:
    gpu_text = ", ".join(f"gpu:{i}" for i in range(gpus))
    cpu_text = f"cpu:0 … cpu:{MAX_LOGICAL_CPUS - 1} (logical CPU devices)"
    return f"{gpu_text}, {cpu_text}" if gpu_text else cpu_text


def is_empty(value) -> bool:
    """None (a field left empty in the app, or a value never given) or blank text."""
    return value is None or (isinstance(value, str) and not value.strip())


def check_utf8_path(path, what: str) -> None:
    """Refuse a path that is not UTF-8 text as this process read it (an ASCII locale reads other
    bytes as surrogates): TensorFlow's file functions take UTF-8, and fail on it with a
    traceback or blame the files."""
    try:
        str(path).encode("utf-8")
    except UnicodeError:
        shown = str(path).encode("utf-8", "backslashreplace").decode()
        raise DistcoreError(
            f"{what} {shown} is not UTF-8 text as this process read it (its locale's encoding is "
            f"{sys.getfilesystemencoding()}), and TensorFlow needs UTF-8 paths: use a UTF-8 locale "
            "(LANG=C.UTF-8, or PYTHONUTF8=1)."
        ) from None


def check_int(name: str, value, *, low: int = 1, high: int | None = None) -> int:
    """Return `value` as an int, or raise a DistcoreError naming the allowed range."""
    allowed = f"a whole number from {low}" + (f" to {high}" if high is not None else " up")
    if is_empty(value):
        raise DistcoreError(f"{name} is empty: it must be {allowed}.")
    if isinstance(value, bool):
        raise DistcoreError(f"{name} ({value!r}) must be {allowed}.")
    if isinstance(value, numbers.Integral):  # numpy's integers too: stored as plain ints
        value = int(value)
    elif isinstance(value, numbers.Real):
        value = float(value)
        if not math.isfinite(value) or value != int(value):
            raise DistcoreError(f"{name} ({value!r}) must be {allowed}.")
        value = int(value)
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise DistcoreError(f"{name} ({value!r}) must be {allowed}.") from None
    if not isinstance(value, int):
        raise DistcoreError(f"{name} ({value!r}) must be {allowed}.")
    if value < low or (high is not None and value > high):
        raise DistcoreError(f"{name} ({value}) must be {allowed}.")
    return value


def check_float(name: str, value, *, low: float, high: float, low_open: bool = False) -> float:
    if is_empty(value):
        raise DistcoreError(f"{name} is empty: it must be a number.")
    if isinstance(value, bool):  # float(True) is 1.0, as check_int refuses True for 1
        raise DistcoreError(f"{name} ({value!r}) must be a number.")
    try:
        number = float(value) + 0.0  # (-0.0 is 0)
    except (TypeError, ValueError):
        raise DistcoreError(f"{name} ({value!r}) must be a number.") from None
    too_low = number <= low if low_open else number < low
    if not math.isfinite(number) or too_low or number > high:
        bracket = "(" if low_open else "["
        raise DistcoreError(f"{name} ({value!r}) must be a finite number in {bracket}{low}, {high}].")
    return number


def check_bool(name: str, value) -> bool:
    """True or False (numpy's too). Text is refused: bool("false") is True."""
    numpy_bool = getattr(getattr(value, "dtype", None), "kind", None) == "b" and getattr(value, "ndim", None) == 0
    if isinstance(value, bool) or numpy_bool:
        return bool(value)
    if is_empty(value):
        raise DistcoreError(f"{name} is empty: it must be true or false.")
    raise DistcoreError(f"{name} ({value!r}) must be true or false (a boolean, not text or a number).")


def data_folder(value) -> str | None:
    """A data folder as an absolute path, or None for none. Absolute, so a run's config.json
    names the same folder whatever folder evaluate or --resume are run from."""
    if is_empty(value):
        return None
    path = os.fspath(value) if isinstance(value, (str, os.PathLike)) else None
    if not isinstance(path, str):
        raise DistcoreError(f"data folder ({value!r}) must be a path, as text or a pathlib.Path.")
    return os.path.abspath(os.path.expanduser(path))


class UnevenBatch(DistcoreError):
    """A global batch that distribute_datasets_from_function cannot divide over the replicas."""

    def __init__(self, global_batch: int, replicas: int):
        below = (
            global_batch - global_batch % replicas or replicas
        )  # never 0; "a global batch of", as a bare "try 3." reads as a replica count
        super().__init__(
            f"with distribute_datasets_from_function the global batch ({global_batch}) must "
            f"divide evenly by the number of replicas ({replicas}); "
            f"try a global batch of {below} or {below + replicas}."
        )
        self.global_batch, self.replicas = global_batch, replicas


def check_task(value) -> str:
    """classifier, gan, or a module:function that returns a distcore Task."""
    if is_empty(value):
        raise DistcoreError("task is empty: it must be classifier, gan, or module:function (your own task).")
    text = str(value).strip()
    if text.lower() in TASKS:
        return text.lower()
    if REFERENCE.match(text):
        return text
    raise DistcoreError(f"task ({value!r}) must be classifier, gan, or module:function naming your own task.")


def check_model(value) -> str:
    """cnn, mlp, a module:function Keras model factory, or "saved" (the run's model.json)."""
    if is_empty(value):
        raise DistcoreError("model is empty: it must be cnn, mlp, or module:function (a Keras model factory).")
    text = str(value).strip()
    if text.lower() in (*MODELS, "saved"):
        return text.lower()
    if REFERENCE.match(text):
        return text
    raise DistcoreError(f"model ({value!r}) must be one of: cnn, mlp, or module:function (a Keras model factory).")


def check_data(value) -> str:
    """fashion-mnist, mnist, "arrays" (the run folder's data.npz), or a path to an .npz file (absolute)."""
    if is_empty(value):
        return "fashion-mnist"
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise DistcoreError(f"data ({value!r}) must be fashion-mnist, mnist, or the path of an .npz file.")
    text = value.strip()
    named = text.lower().replace("_", "-")
    if named in (*DATASETS, "arrays", "datasets"):
        return named
    if text.lower().endswith(".npz"):
        return os.path.abspath(os.path.expanduser(text))
    raise DistcoreError(
        f"data ({value!r}) must be fashion-mnist, mnist, or the path of an .npz file with "
        "x_train, y_train, x_test, y_test."
    )


def check_choice(name: str, value, choices: tuple[str, ...]) -> str:
    if is_empty(value):
        raise DistcoreError(f"{name} is empty: it must be one of: {', '.join(choices)}.")
    text = str(value).strip().lower()
    if text not in choices:
        raise DistcoreError(f"{name} ({value!r}) must be one of: {', '.join(choices)}.")
    return text


@dataclass(frozen=True)
class SplitConfig:
    """One split plan to run with `distcore.plan_split`: ids 0..examples-1, batched by
    `global_batch`, spread over `devices` (one replica each), read through the tf.data shard
    `policy` and the input `api`; every field is checked here, with a message that says what
    is allowed."""

    examples: int
    global_batch: int
    devices: tuple[str, ...]
    policy: str = "auto"
    api: str = "dataset"
    drop_remainder: bool = False
    files: int = 0  # 0: an in-memory dataset; F > 0: ids written to F TFRecord files
    workers: int = 1  # > 1: this is one worker's plan; `devices` are that worker's
    shuffle_seed: int | None = None  # the ids are rows, read in training's epoch-1 order for this seed
    map_after_batch: bool = True  # as training's pipeline; False: it ends at batch(), as the guide's examples
    rows: int = TRAIN_SIZE  # the training rows of the data whose row numbers shuffle_seed orders

    def __post_init__(self):
        set_ = object.__setattr__
        set_(self, "examples", check_int("examples", self.examples, high=MAX_SPLIT_EXAMPLES))
        if self.shuffle_seed is not None:  # row numbers of Fashion-MNIST's training set
            set_(self, "shuffle_seed", check_int("seed", self.shuffle_seed, low=0, high=MAX_SEED))
            set_(self, "rows", check_int("the data's training rows", self.rows, high=MAX_EXAMPLES))
            what = "Fashion-MNIST training rows" if self.rows == TRAIN_SIZE else "the data's training rows"
            set_(self, "examples", check_int(f"examples ({what})", self.examples, high=self.rows))
        set_(self, "global_batch", check_int("global batch size", self.global_batch, high=MAX_GLOBAL_BATCH))
        set_(self, "policy", check_choice("shard policy", self.policy, POLICIES))
        set_(self, "api", check_choice("input API", self.api, APIS))
        set_(self, "files", check_int("files", self.files, low=0, high=64))
        set_(self, "workers", check_int("workers", self.workers, high=16))
        set_(self, "drop_remainder", check_bool("drop_remainder", self.drop_remainder))
        set_(self, "map_after_batch", check_bool("map_after_batch", self.map_after_batch))
        set_(self, "devices", device_set(self.devices))
        if self.global_batch > self.examples:
            raise DistcoreError(
                f"global batch size ({self.global_batch}) is larger than the dataset "
                f"({self.examples} examples): choose a batch of at most {self.examples}."
            )
        replicas = len(self.devices) * self.workers
        if self.api == "function" and self.global_batch % replicas:
            raise UnevenBatch(self.global_batch, replicas)
        if self.files and self.shuffle_seed is not None:
            raise DistcoreError(
                "source files (--files) are for the toy dataset: the Fashion-MNIST rows show "
                "training's own split, which writes no files of ids; set them to 0."
            )
        if self.files and self.files > self.examples:
            raise DistcoreError(
                f"source files ({self.files}) must be at most the number of examples "
                f"({self.examples}): each file holds at least one id."
            )
        if -(-self.examples // self.global_batch) > MAX_SPLIT_STEPS:
            raise DistcoreError(
                f"{self.examples} examples in batches of {self.global_batch} make "
                f"{-(-self.examples // self.global_batch)} steps; a split plan shows at most {MAX_SPLIT_STEPS}: "
                f"use fewer examples or a batch of at least {-(-self.examples // MAX_SPLIT_STEPS)}."
            )

    @property
    def replicas(self) -> int:
        return len(self.devices) * self.workers


@dataclass(frozen=True)
class TrainConfig:
    """Everything needed to repeat a training run (stored as config.json). Every field is checked
    here, with a message that says what is allowed.

    devices: the device set, "cpu:0,cpu:1" or a sequence of names (one replica each).
    model, optimizer, learning_rate, l2: "cnn" or "mlp"; "adam" or "sgd"; the step size; the
        L2 weight penalty (0: none).
    global_batch: examples per step over all replicas (the tutorials' 64 per replica is 64 × replicas).
    epochs, max_steps: how long; max_steps 0 is no limit beyond epochs.
    seed: the initial weights and the shuffle order.
    steps_per_loop: steps per tf.function call (and per metrics record, and per stop check).
    checkpoint_every: steps between checkpoints; 0: only at epoch ends and on a stop.
    keep_checkpoints: the newest N are kept on disk; 0: every one.
    policy, api, drop_remainder: the tf.data shard policy (auto/file/data/off), the input API
        ("dataset": experimental_distribute_dataset, "function": distribute_datasets_from_function),
        and whether a partial last batch is left out.
    train_examples, test_examples: the first N rows of the data's training and test splits
        (Fashion-MNIST's and MNIST's: 60,000 and 10,000).
    data_dir: the folder with the four .gz files (None: the usual places, see distcore.data).
    workers: > 1 for MultiWorkerMirroredStrategy over TF_CONFIG; `devices` are then each worker's.
    task: "classifier", "gan", or module:function returning your own `distcore.Task`.
    data: "fashion-mnist", "mnist", "arrays" (the run folder's data.npz) or an .npz path (distcore.datasets).
    model (for the classifier) may also be a module:function that returns a Keras model, or "saved".
    """

    devices: tuple[str, ...]
    model: str = "cnn"
    optimizer: str = "adam"
    learning_rate: float = 0.001
    l2: float = 0.0
    global_batch: int = 64
    epochs: int = 1
    max_steps: int = 0  # 0: no limit beyond epochs
    seed: int = 0
    steps_per_loop: int = 20
    checkpoint_every: int = 0  # steps; 0: only at epoch ends and on stop
    keep_checkpoints: int = 0  # the newest N are kept on disk; 0: every one
    policy: str = "auto"
    api: str = "dataset"
    drop_remainder: bool = False
    train_examples: int = TRAIN_SIZE
    test_examples: int = TEST_SIZE
    data_dir: str | None = None
    workers: int = 1  # > 1: MultiWorkerMirroredStrategy; `devices` are then each worker's
    task: str = "classifier"
    data: str = "fashion-mnist"

    def __post_init__(self):
        set_ = object.__setattr__
        set_(self, "devices", device_set(self.devices))
        set_(self, "task", check_task(self.task))
        set_(self, "data", check_data(self.data))
        set_(self, "model", check_model(self.model))
        set_(self, "optimizer", check_choice("optimizer", self.optimizer, OPTIMIZERS))
        set_(self, "learning_rate", check_float("learning rate", self.learning_rate, low=0.0, high=10.0, low_open=True))
        set_(self, "l2", check_float("L2 weight penalty", self.l2, low=0.0, high=1.0))
        set_(self, "global_batch", check_int("global batch size", self.global_batch, high=MAX_GLOBAL_BATCH))
        set_(self, "epochs", check_int("epochs", self.epochs, high=1000))
        set_(self, "max_steps", check_int("max steps", self.max_steps, low=0, high=10**9))
        set_(self, "seed", check_int("seed", self.seed, low=0, high=MAX_SEED))
        set_(self, "steps_per_loop", check_int("steps per loop", self.steps_per_loop, high=10_000))
        set_(self, "checkpoint_every", check_int("checkpoint interval", self.checkpoint_every, low=0, high=10**9))
        set_(self, "keep_checkpoints", check_int("checkpoints kept", self.keep_checkpoints, low=0, high=10**6))
        set_(self, "policy", check_choice("shard policy", self.policy, POLICIES))
        set_(self, "api", check_choice("input API", self.api, APIS))
        built_in = self.data in DATASETS  # their sizes are known; other data are checked when read
        set_(
            self,
            "train_examples",
            check_int("train examples", self.train_examples, high=TRAIN_SIZE if built_in else MAX_EXAMPLES),
        )
        set_(
            self,
            "test_examples",
            check_int("test examples", self.test_examples, high=TEST_SIZE if built_in else MAX_EXAMPLES),
        )
        set_(self, "drop_remainder", check_bool("drop_remainder", self.drop_remainder))
        set_(self, "data_dir", data_folder(self.data_dir))
        set_(self, "workers", check_int("workers", self.workers, high=64))
        if self.global_batch > self.train_examples:
            raise DistcoreError(
                f"global batch size ({self.global_batch}) is larger than the training set "
                f"({self.train_examples} examples): choose a batch of at most {self.train_examples}."
            )
        if self.workers > 1 and self.api == "dataset" and self.policy in ("file", "off"):
            why = (
                "every worker would read every example"
                if self.policy == "off"
                else "each worker's own files would set how many steps it takes"
            )
            files = f" --files {self.workers}" if self.policy == "file" else ""  # a file per worker at least
            raise DistcoreError(
                f"shard policy {self.policy.upper()} cannot train across {self.workers} workers with "
                f"experimental_distribute_dataset: {why}, so an epoch would no longer be the training set cut "
                "into global batches, which distcore's epochs, progress and exact resume count on. Use AUTO or "
                "DATA, or the function API (its input function shards the data itself). The Split tab with "
                f"{self.workers} worker processes (or `split --workers {self.workers} --policy {self.policy}"
                f"{files} --examples 12 --global-batch 4`) shows what {self.policy.upper()} does."
            )
        if self.api == "function" and self.global_batch % self.replicas:
            raise UnevenBatch(self.global_batch, self.replicas)
        if self.policy == "file" and self.data not in DATASETS:
            raise DistcoreError(
                "shard policy FILE reads the data from files that distcore writes of the built-in datasets; "
                "your own arrays are read from memory: use AUTO, DATA or OFF."
            )
        if self.task == "gan" and (self.model, self.optimizer, self.learning_rate, self.l2) != (
            "cnn",
            "adam",
            0.001,
            0.0,
        ):
            raise DistcoreError(
                "the GAN trains the guide's own discriminator and generator with its two Adam optimizers "
                "(learning rates 3e-4 and 4e-4): model, optimizer, learning rate and L2 do not apply; leave them unset."
            )

    @property
    def replicas(self) -> int:
        return len(self.devices) * self.workers

    def steps_per_epoch(self) -> int:
        full, rest = divmod(self.train_examples, self.global_batch)
        return full + (1 if rest and not self.drop_remainder else 0)

    def total_steps(self) -> int:
        total = self.steps_per_epoch() * self.epochs
        return min(total, self.max_steps) if self.max_steps else total

    def to_dict(self) -> dict:
        data = dataclasses.asdict(self)
        data["devices"] = list(self.devices)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "TrainConfig":
        """A configuration from a dict (config.json's); keys that are not fields are left out."""
        if not isinstance(data, Mapping):  # a list: say so, not "the configuration has no devices."
            raise DistcoreError(f"a configuration must be a dict of its fields, not {type(data).__name__}.")
        fields = dataclasses.fields(cls)
        missing = [f.name for f in fields if f.default is dataclasses.MISSING and f.name not in data]
        if missing:
            raise DistcoreError(f"the configuration has no {', '.join(missing)}.")
        names = {f.name for f in fields}
        known = {k: v for k, v in data.items() if k in names}
        return cls(**known)

    def replace(self, **changes) -> "TrainConfig":
        return dataclasses.replace(self, **changes)

    # What a resume may change without invalidating the checkpoint.
    RESUMABLE = (
        "epochs",
        "max_steps",
        "steps_per_loop",
        "checkpoint_every",
        "keep_checkpoints",
        "devices",
        "workers",
        "data_dir",
    )

    def resume_conflicts(self, saved: "TrainConfig") -> list[str]:
        """Fields that differ from the saved run and would make its checkpoint mean something else."""
        mine, theirs = self.to_dict(), saved.to_dict()
        return [k for k in mine if k not in self.RESUMABLE and mine[k] != theirs.get(k)]
