"""Form values <-> TrainConfig <-> command line, and the resume rules in people's words.

The app's Setup form sends plain values (a device count or GPU checkboxes, numbers that may be
empty); this module turns them into a checked `TrainConfig` or `SplitConfig`, and turns those into
the `distcore train` / `cluster` / `split` flags that `cli.add_train_flags` and the `split` parser
define, and the command that launches a run (`launch_command`: `train`, `cluster --workers W`, or
`train --engine ray --workers W`). The flags are built here only: `tests/test_forms.py` parses them
back with the CLI's own parser and gets the same configuration. What the form offers (`Offer`: the
built-in tasks, models and data, those the settings register, uploaded .npz files, checked and kept
by `store_upload`, and the Ray engine where Ray is installed) is decided here too, so a value the
form sends is always one it offered. No TensorFlow, no Gradio, no Ray.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from . import devices as devmod, settings as env
from .config import MODELS, REFERENCE, TEST_SIZE, TRAIN_SIZE, DistcoreError, SplitConfig, TrainConfig, check_int
from .tasks import IMAGE_SHAPES

MAX_WORKERS = 8  # worker processes the app offers on one machine

# The Setup fields training reads, in train_config's order, each with the TrainConfig field it
# sets (the device choice, two fields, sets `devices`).
TRAIN_FORM = (
    ("count", "devices"),
    ("boxes", "devices"),
    ("batch", "global_batch"),
    ("policy", "policy"),
    ("api", "api"),
    ("model", "model"),
    ("optimizer", "optimizer"),
    ("lr", "learning_rate"),
    ("epochs", "epochs"),
    ("max_steps", "max_steps"),
    ("steps_per_loop", "steps_per_loop"),
    ("ckpt_every", "checkpoint_every"),
    ("seed", "seed"),
    ("train_examples", "train_examples"),
    ("test_examples", "test_examples"),
    ("drop", "drop_remainder"),
    ("workers", "workers"),
    ("ckpt_keep", "keep_checkpoints"),
    ("task", "task"),
    ("data", "data"),
    ("upload", "data"),
)

# The Setup fields a resume passes on: TrainConfig.RESUMABLE less data_dir, which the form does
# not set. Every other field the form sets must match the run's (check_same_setup).
FORM_RESUMABLE = tuple(k for k in TrainConfig.RESUMABLE if k != "data_dir")

# Each TrainConfig field as the form (and its messages) names it.
FIELD_LABELS = {
    "model": "model",
    "optimizer": "optimizer",
    "learning_rate": "learning rate",
    "global_batch": "global batch size",
    "seed": "seed",
    "policy": "shard policy",
    "api": "input API",
    "train_examples": "training examples",
    "test_examples": "test examples",
    "drop_remainder": "drop_remainder",
    "epochs": "epochs",
    "max_steps": "max steps",
    "steps_per_loop": "steps per loop",
    "checkpoint_every": "checkpoint interval",
    "keep_checkpoints": "checkpoints kept",
    "devices": "devices",
    "workers": "worker processes",
    "l2": "L2 weight",
    "data_dir": "data folder",
    "task": "task",
    "data": "data",
}


# ---------------------------------------------------------------- what the form offers

BUILT_IN_TASKS = (("Classifier", "classifier"), ("GAN", "gan"))
BUILT_IN_MODELS = (("CNN", "cnn"), ("MLP", "mlp"))
DATA_NAMES = {"fashion-mnist": "Fashion-MNIST", "mnist": "MNIST"}
UPLOAD = "npz"  # the data choice of an uploaded .npz; the form's `upload` field holds its id
UPLOADS_FOLDER = ".uploads"  # under the runs folder: no run takes a name that starts with "."
UPLOAD_ID = re.compile(r"^[0-9a-f]{16}$")  # the first 16 hex digits of the file's SHA-256
UNPACKED_FACTOR = 10  # an upload's arrays unpack to at most this many times the upload limit
# How a run on 2+ worker processes starts them: the local launcher (`cluster`) or Ray Train.
ENGINES = (("local processes", "local"), ("Ray", "ray"))
RAY_MISSING = (
    "the Ray engine needs Ray where the app runs, and it is not installed: pip install 'distcore[ray]' "
    "(or pip install -r requirements-ray.txt), then restart the app; or choose local processes."
)


@dataclass(frozen=True)
class Offer:
    """What the app's training form offers besides the built-ins: the models and tasks registered
    by DISTCORE_MODELS and DISTCORE_TASKS, as (name, module:function) pairs; MNIST when this
    machine has it; the folder of checked uploads; the Ray engine where Ray is installed, and the
    cluster its runs join (DISTCORE_RAY_ADDRESS; empty: a local Ray on 127.0.0.1). A value the form
    sends must be one of these, so a client never names a function or a file of its own."""

    models: tuple[tuple[str, str], ...] = ()
    tasks: tuple[tuple[str, str], ...] = ()
    mnist: bool = False
    uploads: Path | None = None
    max_upload_bytes: int = 200 * 2**20
    ray: bool = False
    ray_address: str = ""


def registered(setting: str, text) -> tuple[tuple[str, str], ...]:
    """The (name, module:function) pairs of a DISTCORE_MODELS or DISTCORE_TASKS value,
    "name=module:function" comma-separated; DistcoreError for one of another form or a name taken."""
    pairs, taken = [], {"cnn", "mlp", "classifier", "gan", "saved", UPLOAD}
    for item in filter(None, (part.strip() for part in str(text or "").split(","))):
        name, equals, reference = (part.strip() for part in item.partition("="))
        if not equals or not re.fullmatch(r"[A-Za-z0-9][\w.-]{0,39}", name) or not REFERENCE.match(reference):
            raise DistcoreError(
                f"{setting}: {item!r} must be name=module:function (say wide=mymodels:wide_cnn), names of "
                "1-40 letters, digits, '_', '.' or '-', entries separated by commas."
            )
        if name.lower() in taken:
            raise DistcoreError(f"{setting}: the name {name!r} is taken (built in, or listed twice): choose another.")
        taken.add(name.lower())
        pairs.append((name, reference))
    return tuple(pairs)


def make_offer(runs_root, mnist: bool | None = None, ray: bool | None = None) -> Offer:
    """What an app on `runs_root` offers, from the settings (DistcoreError for a bad one). `mnist`:
    whether this machine has MNIST (None: look, datasets.mnist_available); `ray`: whether Ray is
    installed (None: look, ray_installed)."""
    from . import datasets

    megabytes = check_int("DISTCORE_MAX_UPLOAD_MB", env.get("DISTCORE_MAX_UPLOAD_MB"), low=1, high=10**6)
    return Offer(
        models=registered("DISTCORE_MODELS", env.get("DISTCORE_MODELS")),
        tasks=registered("DISTCORE_TASKS", env.get("DISTCORE_TASKS")),
        mnist=datasets.mnist_available() if mnist is None else bool(mnist),
        uploads=Path(runs_root) / UPLOADS_FOLDER,
        max_upload_bytes=megabytes * 2**20,
        ray=ray_installed() if ray is None else bool(ray),
        ray_address=str(env.get("DISTCORE_RAY_ADDRESS") or "").strip(),
    )


def ray_installed() -> bool:
    """Whether Ray can be imported here, found without importing it (the app's process never imports Ray)."""
    try:
        return importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):  # (a module "ray" set to None, or one without a spec)
        return False


def task_choices(offer: Offer) -> list[tuple[str, str]]:
    return [*BUILT_IN_TASKS, *offer.tasks]


def model_choices(offer: Offer) -> list[tuple[str, str]]:
    return [*BUILT_IN_MODELS, *offer.models]


def data_choices(offer: Offer) -> list[tuple[str, str]]:
    built_in = [(label, key) for key, label in DATA_NAMES.items() if key != "mnist" or offer.mnist]
    return [*built_in, ("Your .npz", UPLOAD)]


def engine_choices(offer: Offer) -> list[tuple[str, str]]:
    return [(label, key) for label, key in ENGINES if key != "ray" or offer.ray]


def pick_engine(engine, workers: int, offer: Offer) -> str:
    """How a run on `workers` worker processes starts them: "local" (the local launcher, `cluster`)
    or "ray" (Ray Train, `train --engine ray`), named by its value or its label; empty is local. One
    worker process trains in one process whatever the engine. Ray only where the offer has it."""
    text = "" if engine is None else str(engine).strip()
    key = next((k for label, k in ENGINES if text.lower() in (k, label.lower())), None) if text else "local"
    if key is None:
        offered = ", ".join(k for _, k in engine_choices(offer))
        raise DistcoreError(f"engine {text!r} is not offered here: it must be one of: {offered}.")
    if workers <= 1:
        return "local"
    if key == "ray" and not offer.ray:
        raise DistcoreError(RAY_MISSING)
    return key


def pick(kind: str, value, choices, setting: str) -> str:
    """The form's task or model as TrainConfig takes it: one of `choices` ((label, value) pairs),
    named by its value or its label."""
    text = "" if value is None else str(value).strip()
    for label, key in choices:
        if text == key or text.lower() == label.lower():
            return key
    offered = ", ".join(key if key == label.lower() else f"{label} ({key})" for label, key in choices)
    if not text:
        raise DistcoreError(f"{kind} is empty: it must be one of: {offered}.")
    raise DistcoreError(
        f"{kind} {text!r} is not offered here: it must be one of: {offered}. An administrator adds others "
        f"with {setting}."
    )


def pick_data(data, upload, offer: Offer) -> str:
    """The form's data as TrainConfig takes it: fashion-mnist, mnist (where this machine has it),
    or, for UPLOAD, the kept upload's path."""
    text = "fashion-mnist" if data is None or str(data).strip() == "" else str(data).strip().lower()
    if text == "fashion-mnist" or (text == "mnist" and offer.mnist):
        return text
    if text == "mnist":
        raise DistcoreError(
            "MNIST is not on this machine, so the app does not offer it: choose Fashion-MNIST or upload an .npz."
        )
    if text == UPLOAD:
        return str(upload_path(upload, offer))
    offered = ", ".join(key for _, key in data_choices(offer))
    raise DistcoreError(f"data {data!r} is not offered here: it must be one of: {offered} (an uploaded file).")


def upload_path(upload, offer: Offer) -> Path:
    """The kept file of an upload id; DistcoreError when there is none."""
    key = "" if upload is None else str(upload).strip()
    if not key:
        raise DistcoreError("no .npz file is uploaded yet: upload one, or choose another data set.")
    if offer.uploads is None or not UPLOAD_ID.match(key):
        raise DistcoreError(f"{key!r} is not the id of an upload to this app: upload the file again.")
    path = offer.uploads / f"{key}.npz"
    if not path.is_file():
        raise DistcoreError(f"the uploaded file {key}.npz is no longer kept here: upload it again.")
    return path


def form_data(data: str, offer: Offer) -> tuple[str, str | None]:
    """A run's `data` as the form's (data, upload) fields: a kept upload's path becomes (UPLOAD,
    its id); data the form does not offer stays as it is, and train_config names it."""
    if data in DATA_NAMES:
        return data, None
    path = Path(data)
    if offer.uploads is not None and path.parent == offer.uploads and path.suffix == ".npz":
        if UPLOAD_ID.match(path.stem):
            return UPLOAD, path.stem
    return data, None


def data_facts(data: str, offer: Offer | None = None) -> dict:
    """Rows, example shape and classes of a TrainConfig `data` the form offers, and its name
    for people: the built-ins' are known; an upload's are kept beside it (store_upload)."""
    if data in DATA_NAMES:
        return {"name": DATA_NAMES[data], "train_rows": TRAIN_SIZE, "test_rows": TEST_SIZE, "shape": [28, 28]}
    return upload_record(Path(data))


def upload_record(path: Path) -> dict:
    """What store_upload kept of an upload (its .json), else what the .npz itself says."""
    try:
        record = json.loads(path.with_suffix(".json").read_text(encoding="utf-8"))
        if isinstance(record, dict) and isinstance(record.get("train_rows"), int):
            return record
    except (OSError, ValueError):
        pass
    from . import datasets

    return {"name": path.name, **datasets.npz_summary(path)}


def data_rows(data, upload, offer: Offer) -> tuple[int, int]:
    """(training rows, test rows) of the form's data choice."""
    facts = data_facts(pick_data(data, upload, offer), offer)
    return facts["train_rows"], facts["test_rows"]


def gan_data(offer: Offer) -> str:
    """The data the GAN trains on by default: MNIST, as the guide, where this machine has it."""
    return "mnist" if offer.mnist else "fashion-mnist"


def data_note(task, data, upload, offer: Offer) -> str:
    """A line under the data choice: an upload's summary, or which data the GAN trains on ("" for
    "Your .npz" before a file is uploaded). DistcoreError for data the task cannot train on."""
    if str(data) == UPLOAD and not upload:
        return ""
    chosen = pick_data(data, upload, offer)
    facts = data_facts(chosen, offer)
    check_task_data(str(task), facts)
    if chosen not in DATA_NAMES:
        return upload_line(facts)
    if str(task) == "gan":
        if chosen == "mnist":
            return "The GAN trains on MNIST, as the guide does."
        return "The GAN trains on Fashion-MNIST" + ("." if offer.mnist else ": this machine has no MNIST.")
    return ""


def check_task_data(task: str, facts: dict, model: str | None = None) -> None:
    """Refuse data (its data_facts) that the built-in task cannot train on: the GAN and the
    built-in models (`model`) need 28×28 images, the classifier class labels."""
    shape = "×".join(str(n) for n in facts.get("shape") or ())
    images = tuple(facts.get("shape") or ()) in IMAGE_SHAPES  # tasks' own rule
    if task == "gan" and not images:
        raise DistcoreError(
            f"the GAN generates 28×28 grey images and trains on images of that shape; {facts['name']} holds {shape}."
        )
    if task == "classifier" and model in MODELS and not images:
        raise DistcoreError(
            f"the {model.upper()} takes 28×28 grey images; {facts['name']} holds {shape}: train it with a model "
            "of your own that takes them (DISTCORE_MODELS)."
        )
    if task == "classifier" and facts.get("targets") == "values":
        raise DistcoreError(
            f"{facts['name']} holds real-valued targets, not class labels: the classifier trains on class "
            "numbers 0..C-1; a regression needs a task of your own (docs/tasks.md)."
        )


def class_names(data: str, classes: int) -> list[str]:
    """The classes' names an evaluation shows: Fashion-MNIST's, else the class numbers."""
    from .data import CLASS_NAMES

    return list(CLASS_NAMES) if data == "fashion-mnist" else [str(i) for i in range(classes)]


def upload_line(record: dict) -> str:
    """'**digits.npz**: 1,000 + 200 rows of 8×8, 10 classes'."""
    shape = "×".join(str(n) for n in record.get("shape") or []) or "scalars"
    classes = record.get("classes")
    kind = ", real-valued targets" if record.get("targets") == "values" else f", {classes} classes" if classes else ""
    return (
        f"**{record.get('name', 'upload')}**: {record['train_rows']:,} + {record['test_rows']:,} rows of {shape}{kind}"
    )


def store_upload(path, offer: Offer) -> dict:
    """Check an uploaded .npz and keep it as `<uploads>/<id>.npz`, the id the first 16 hex digits of
    its SHA-256, beside `<id>.json`: {"upload", "name", "train_rows", "test_rows", "shape", "classes", "targets",
    "bytes"}. A file larger than offer.max_upload_bytes (or unpacking to more than UNPACKED_FACTOR
    times that), or one datasets.read_npz refuses, is a DistcoreError naming the file, and nothing
    is written. The same file uploaded again is the same id and is not copied again."""
    from . import datasets

    source = Path(path)
    name = source.name
    limit = offer.max_upload_bytes
    if offer.uploads is None:
        raise DistcoreError("this app keeps no uploads (no runs folder).")
    try:
        size = source.stat().st_size
    except OSError as err:
        raise DistcoreError(f"cannot read the upload {name}: {err.strerror or err}.") from None
    if size > limit:
        raise DistcoreError(
            f"{name} is {megabytes(size)}: an upload may be at most {megabytes(limit)} (DISTCORE_MAX_UPLOAD_MB)."
        )
    if zipfile.is_zipfile(source):
        try:
            with zipfile.ZipFile(source) as archive:
                unpacked = sum(info.file_size for info in archive.infolist())
        except (OSError, zipfile.BadZipFile) as err:
            raise DistcoreError(f"{name} cannot be read as an .npz file ({err}).") from None
        if unpacked > UNPACKED_FACTOR * limit:
            raise DistcoreError(
                f"{name} unpacks to {megabytes(unpacked)}: an upload's arrays may take at most "
                f"{megabytes(UNPACKED_FACTOR * limit)} unpacked."
            )
    try:
        summary = datasets.npz_summary(source)
    except DistcoreError as err:  # its messages name the file by the path Gradio kept it under
        raise DistcoreError(str(err).replace(str(source), name)) from None
    digest = hashlib.sha256()
    with source.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    key = digest.hexdigest()[:16]
    record = {"upload": key, "name": name, **summary, "bytes": size}
    folder = offer.uploads
    target = folder / f"{key}.npz"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if not target.is_file():
            keep_atomically(folder, target, lambda tmp: shutil.copyfile(source, tmp))
        keep_atomically(folder, target.with_suffix(".json"), lambda tmp: Path(tmp).write_text(json.dumps(record)))
    except OSError as err:
        raise DistcoreError(f"cannot keep {name} in {folder}: {err.strerror or err}.") from None
    return record


def keep_atomically(folder: Path, target: Path, write) -> None:
    """Write a file through a temporary one in `folder`, renamed over `target`: readers see it whole or not at all."""
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".incoming-")
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def megabytes(n: int) -> str:
    return f"{n / 2**20:,.1f} MB"


# ---------------------------------------------------------------- form -> configuration


def selected_devices(gpus, cpu_count, gpu_boxes) -> tuple[str, ...]:
    """The device set the form chose: the GPU/CPU checkboxes where this machine has GPUs
    (`gpus`), else `cpu_count` logical CPU devices."""
    if gpus:
        if not gpu_boxes:
            raise DistcoreError("the device set is empty: choose at least one device.")
        return devmod.parse_device_list(",".join(gpu_boxes))
    if not cpu_count:
        raise DistcoreError("the device set is empty: choose how many logical CPU devices to use.")
    return devmod.resolve(replicas=int(cpu_count), gpus=0)


def replica_count(gpus, cpu_count, gpu_boxes, workers) -> int:
    """Replicas the form describes: one CPU replica per worker process with 2+ workers."""
    workers = check_int("worker processes", workers, high=MAX_WORKERS)
    return workers if workers > 1 else len(selected_devices(gpus, cpu_count, gpu_boxes))


def train_config(
    gpus,
    cpu_count,
    gpu_boxes,
    global_batch,
    policy,
    api,
    model,
    optimizer,
    learning_rate,
    epochs,
    max_steps,
    steps_per_loop,
    checkpoint_every,
    seed,
    train_examples,
    test_examples,
    drop_remainder=False,
    workers=1,
    keep_checkpoints=0,
    task="classifier",
    data="fashion-mnist",
    upload=None,
    *,
    offer: Offer | None = None,
) -> TrainConfig:
    """The Setup form's values (TRAIN_FORM order) as a checked TrainConfig. Empty max steps,
    checkpoint interval, checkpoints kept and seed are their 0 defaults; an empty task and data
    are the classifier and Fashion-MNIST. Task, model and data must be ones `offer` offers. The
    model, optimizer and learning rate do not apply to the GAN (it trains the guide's two models
    with their own optimizers), nor the model to a task of your own: they are left at their defaults."""
    offer = offer or Offer()
    workers = check_int("worker processes", workers, high=MAX_WORKERS)
    task = pick("task", task if task not in (None, "") else "classifier", task_choices(offer), "DISTCORE_TASKS")
    data = pick_data(data, upload, offer)
    if task == "classifier":
        model = pick("model", model, model_choices(offer), "DISTCORE_MODELS")
    else:
        model = "cnn"
    if task == "gan":
        optimizer, learning_rate = "adam", 0.001
    # Under MultiWorkerMirroredStrategy a CPU-only worker has exactly one replica.
    names = ("cpu:0",) if workers > 1 else selected_devices(gpus, cpu_count, gpu_boxes)
    cfg = TrainConfig(
        devices=names,
        workers=workers,
        model=model,
        optimizer=optimizer,
        learning_rate=learning_rate,
        global_batch=global_batch,
        epochs=epochs,
        max_steps=max_steps or 0,
        seed=seed if seed is not None else 0,
        steps_per_loop=steps_per_loop,
        checkpoint_every=checkpoint_every or 0,
        policy=policy,
        api=api,
        train_examples=train_examples,
        test_examples=test_examples,
        drop_remainder=bool(drop_remainder),
        keep_checkpoints=keep_checkpoints or 0,
        task=task,
        data=data,
    )
    check_data_fits(cfg, offer)
    return cfg


def check_data_fits(cfg: TrainConfig, offer: Offer) -> None:
    """An upload's rows bound the examples a run takes, and the GAN takes 28x28 images only (the
    built-ins' bounds are TrainConfig's own)."""
    if cfg.data in DATA_NAMES:
        return
    facts = data_facts(cfg.data, offer)
    for field, rows in (("train_examples", facts["train_rows"]), ("test_examples", facts["test_rows"])):
        if getattr(cfg, field) > rows:
            raise DistcoreError(
                f"{FIELD_LABELS[field]} ({getattr(cfg, field):,}) must be at most the {rows:,} rows "
                f"{facts['name']} has."
            )
    check_task_data(cfg.task, facts, cfg.model)


def model_label(cfg: TrainConfig, offer: Offer | None = None) -> str:
    """What trains, for people: the model (a registered one by its name), 'GAN', or a task's name."""
    offer = offer or Offer()
    if cfg.task == "classifier":
        return next((name for name, ref in offer.models if ref == cfg.model), cfg.model)
    if cfg.task == "gan":
        return "GAN"
    return next((name for name, ref in offer.tasks if ref == cfg.task), cfg.task)


def data_label(data: str, offer: Offer | None = None) -> str:
    """A data set's name for people: Fashion-MNIST, MNIST, or the uploaded file's name."""
    if data in DATA_NAMES:
        return DATA_NAMES[data]
    try:
        return str(data_facts(data, offer).get("name") or Path(data).name)
    except DistcoreError:
        return Path(data).name


def summary(cfg: TrainConfig, offer: Offer | None = None, engine: str = "local") -> str:
    """What a new run of `cfg` trains, in one line: 'cnn · adam 0.001 · 1 epoch (938 steps) of
    60,000 examples · batch 64 on 2 replicas'; the data is named when it is not the classifier's
    Fashion-MNIST, and Ray when it starts the worker processes."""
    where = (
        where_trained(cfg.devices, cfg.workers, engine)
        if cfg.workers > 1
        else f"{len(cfg.devices)} replica" + ("s" if len(cfg.devices) != 1 else "")
    )
    epochs = f"{cfg.epochs} epoch" + ("s" if cfg.epochs != 1 else "")
    limit = f", at most {cfg.max_steps}" if cfg.max_steps else ""
    what = model_label(cfg, offer) + ("" if cfg.task == "gan" else f" · {cfg.optimizer} {cfg.learning_rate}")
    data = "" if (cfg.task, cfg.data) == ("classifier", "fashion-mnist") else f" ({data_label(cfg.data, offer)})"
    return (
        f"{what} · {epochs} ({cfg.total_steps():,} steps{limit}) of {cfg.train_examples:,} examples{data} · "
        f"batch {cfg.global_batch} on {where} · {cfg.policy.upper()} · {cfg.api}"
    )


def where_trained(devices, workers: int, engine: str = "local", each: bool = False) -> str:
    """'2 worker processes', '2 worker processes on Ray', or the devices of one process: 'cpu:0, cpu:1'.
    `each`: a cluster's line also names each worker's devices ('... (cpu:0 each)')."""
    if workers <= 1:
        return ", ".join(devices)
    where = f"{workers} worker processes" + (" on Ray" if engine == "ray" else "")
    return where + (f" ({', '.join(devices)} each)" if each else "")


def form_values(cfg: TrainConfig, offer: Offer | None = None) -> dict:
    """The Setup form's fields (TRAIN_FORM keys) that show `cfg`, the device choice left out
    (which devices a form can offer depends on the machine); a kept upload as (UPLOAD, its id)."""
    values = {key: getattr(cfg, field) for key, field in TRAIN_FORM if field != "devices"}
    values["data"], values["upload"] = form_data(cfg.data, offer or Offer())
    return values


def not_offered(values: dict, offer: Offer) -> dict:
    """The form_values this app's form cannot show ({key: value}): a task, model or data of
    another app or of the CLI."""
    out = {}
    if values["task"] not in {key for _, key in task_choices(offer)}:
        out["task"] = values["task"]
    if values["model"] not in {key for _, key in model_choices(offer)}:
        out["model"] = values["model"]
    if values["data"] not in {key for _, key in data_choices(offer)}:
        out["data"] = values["data"]
    return out


# ---------------------------------------------------------------- configuration -> command line


def flag(field: str) -> str:
    """A TrainConfig field's CLI flag, as cli.add_train_flags names it: global_batch -> --global-batch."""
    return "--" + field.replace("_", "-")


def config_args(cfg: TrainConfig, fields) -> list[str]:
    """The flags that give `fields` of `cfg` (devices only for one worker process: each worker
    of a cluster has its own). Every field is passed, so 0 keeps its meaning (max steps 0 lifts
    a limit); False, None and an L2 weight of 0 are the CLI's defaults and are left out."""
    args = []
    for field in sorted(fields, key=lambda f: f != "devices"):  # the devices first, as the CLI's usage shows them
        value = getattr(cfg, field)
        if field == "workers" or (field == "devices" and cfg.workers > 1):
            continue  # the launch's command (train, or cluster --workers W) says it
        if value is None or value is False or (field == "l2" and not value):
            continue
        if (field, value) in (("task", "classifier"), ("data", "fashion-mnist")):
            continue  # the CLI's defaults
        if value is True:
            args.append(flag(field))
        elif isinstance(value, (list, tuple)):
            args += [flag(field), ",".join(str(v) for v in value)]
        else:
            args += [flag(field), str(value)]
    return args


TRAIN_FIELDS = (
    "devices",
    "global_batch",
    "epochs",
    "max_steps",
    "seed",
    "steps_per_loop",
    "checkpoint_every",
    "keep_checkpoints",
    "model",
    "optimizer",
    "learning_rate",
    "l2",
    "policy",
    "api",
    "train_examples",
    "test_examples",
    "drop_remainder",
    "data_dir",
    "task",
    "data",
)


def train_args(cfg: TrainConfig) -> list[str]:
    """The `train` (or `cluster --workers W`) flags of a new run of `cfg`, --run-dir aside."""
    return config_args(cfg, TRAIN_FIELDS)


def launch_command(workers: int, engine: str = "local", ray_address: str = "") -> list[str]:
    """The command that trains a run on `workers` worker processes, before its --run-dir and flags:
    `train` (one process), `cluster --workers W` (the local launcher), or `train --engine ray
    --workers W` (Ray Train's workers; with `ray_address` they join that Ray cluster, without it the
    driver starts a local Ray instance on 127.0.0.1). The run folder is the same either way, so a
    run started on one engine resumes on the other."""
    if engine not in {key for _, key in ENGINES}:
        raise DistcoreError(f"engine {engine!r} must be one of: {', '.join(key for _, key in ENGINES)}.")
    workers = int(workers)
    if workers <= 1:
        return ["train"]
    if engine == "ray":
        address = [f"--ray-address={ray_address}"] if ray_address else []  # (one word: an address is no flag)
        return ["train", "--engine", "ray", "--workers", str(workers), *address]
    return ["cluster", "--workers", str(workers)]


def resume_args(cfg: TrainConfig) -> list[str]:
    """The flags of the resumable fields the form sets; all are passed, so a max steps of 0 lifts
    the limit."""
    return config_args(cfg, FORM_RESUMABLE)


def split_args(cfg: SplitConfig) -> list[str]:
    """The `split` command line of a plan on cfg.workers worker processes."""
    args = [
        "split",
        "--workers",
        str(cfg.workers),
        "--examples",
        str(cfg.examples),
        "--global-batch",
        str(cfg.global_batch),
        "--policy",
        cfg.policy,
        "--api",
        cfg.api,
        "--files",
        str(cfg.files),
    ]
    args += ["--drop-remainder"] if cfg.drop_remainder else []
    args += ["--shuffle-seed", str(cfg.shuffle_seed)] if cfg.shuffle_seed is not None else []
    return args


def planner_request(cfg: SplitConfig) -> dict:
    """A plan request for `distcore planner` (one process, cfg.replicas replicas)."""
    return {
        "examples": cfg.examples,
        "global_batch": cfg.global_batch,
        "replicas": cfg.replicas,
        "policy": cfg.policy,
        "api": cfg.api,
        "drop_remainder": cfg.drop_remainder,
        "files": cfg.files,
        "shuffle_seed": cfg.shuffle_seed,
        "rows": cfg.rows,
    }


# ---------------------------------------------------------------- the resume rules


def shown(field: str, value) -> str:
    """A config value as the form shows it."""
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    if field == "data":
        return data_label(value)
    if field == "max_steps" and not value:
        return "no limit"
    if field == "checkpoint_every" and not value:
        return "0 (epoch ends)"
    if field == "keep_checkpoints" and not value:
        return "0 (all)"
    return str(value)


def listed(words: list[str]) -> str:
    """'a, b and c'."""
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def check_same_setup(name: str, saved: TrainConfig, wanted: TrainConfig) -> None:
    """Refuse a resume whose form differs from the run outside the resumable fields
    (TrainConfig.resume_conflicts): the run's checkpoints were trained with the run's values."""
    differ = wanted.resume_conflicts(saved)
    if differ:
        named = ", ".join(
            f"{FIELD_LABELS.get(k, k)} (the run: {shown(k, getattr(saved, k))}, "
            f"the form: {shown(k, getattr(wanted, k))})"
            for k in differ
        )
        raise DistcoreError(
            f"The training form differs from run {name} in {named}, and its checkpoints were trained with the "
            f"run's values. To resume {name}, set these back in the form (the button "
            "'Use the followed run's settings' copies the run's); to train with them, start a new run. A resume "
            f"may change only {listed([FIELD_LABELS[k] for k in FORM_RESUMABLE])}."
        )


def resumed_config(name: str, saved: TrainConfig, form: TrainConfig) -> TrainConfig:
    """What a resume from the form trains: the form's values and the run's L2 weight (the form
    has no field for it); DistcoreError if the form differs from the run elsewhere."""
    wanted = form.replace(l2=saved.l2)
    check_same_setup(name, saved, wanted)
    return wanted


def resume_changes(saved: TrainConfig, wanted: TrainConfig) -> list[str]:
    """The resumable fields a resume changes, as 'epochs 1 → 3'."""
    return [
        f"{FIELD_LABELS[k]} {shown(k, getattr(saved, k))} → {shown(k, getattr(wanted, k))}"
        for k in FORM_RESUMABLE
        if getattr(saved, k) != getattr(wanted, k)
    ]


def resumable_values(wanted: TrainConfig) -> dict:
    """The resumable fields' values, as runs.resume_config checks them."""
    return {k: getattr(wanted, k) for k in FORM_RESUMABLE}
