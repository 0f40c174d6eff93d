"""Form values <-> TrainConfig <-> command line, and the resume rules in people's words.

The app's Setup form sends plain values (a device count or GPU checkboxes, numbers that may be
empty); this module turns them into a checked `TrainConfig` or `SplitConfig`, and turns those into
the `distcore train` / `cluster` / `split` flags that `cli.add_train_flags` and the `split` parser
define. The flags are built here only: `tests/test_forms.py` parses them back with the CLI's own
parser and gets the same configuration. No TensorFlow, no Gradio.
"""

from __future__ import annotations

from . import devices as devmod
from .config import DistcoreError, SplitConfig, TrainConfig, check_int

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
}


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
) -> TrainConfig:
    """The Setup form's values (TRAIN_FORM order) as a checked TrainConfig. Empty max steps,
    checkpoint interval, checkpoints kept and seed are their 0 defaults."""
    workers = check_int("worker processes", workers, high=MAX_WORKERS)
    # Under MultiWorkerMirroredStrategy a CPU-only worker has exactly one replica.
    names = ("cpu:0",) if workers > 1 else selected_devices(gpus, cpu_count, gpu_boxes)
    return TrainConfig(
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
    )


def summary(cfg: TrainConfig) -> str:
    """What a new run of `cfg` trains, in one line: 'cnn · adam 0.001 · 1 epoch (938 steps) of
    60,000 examples · batch 64 on 2 replicas'."""
    where = (
        f"{cfg.workers} worker processes"
        if cfg.workers > 1
        else f"{len(cfg.devices)} replica" + ("s" if len(cfg.devices) != 1 else "")
    )
    epochs = f"{cfg.epochs} epoch" + ("s" if cfg.epochs != 1 else "")
    limit = f", at most {cfg.max_steps}" if cfg.max_steps else ""
    return (
        f"{cfg.model} · {cfg.optimizer} {cfg.learning_rate} · {epochs} ({cfg.total_steps():,} steps{limit}) of "
        f"{cfg.train_examples:,} examples · batch {cfg.global_batch} on {where} · {cfg.policy.upper()} · {cfg.api}"
    )


def form_values(cfg: TrainConfig) -> dict:
    """The Setup form's fields (TRAIN_FORM keys) that show `cfg`, the device choice left out
    (which devices a form can offer depends on the machine)."""
    return {key: getattr(cfg, field) for key, field in TRAIN_FORM if field != "devices"}


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
)


def train_args(cfg: TrainConfig) -> list[str]:
    """The `train` (or `cluster --workers W`) flags of a new run of `cfg`, --run-dir aside."""
    return config_args(cfg, TRAIN_FIELDS)


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
    }


# ---------------------------------------------------------------- the resume rules


def shown(field: str, value) -> str:
    """A config value as the form shows it."""
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
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
            f"{FIELD_LABELS.get(k, k)} (the run: {shown(k, getattr(saved, k))}, Setup: {shown(k, getattr(wanted, k))})"
            for k in differ
        )
        raise DistcoreError(
            f"Setup differs from run {name} in {named}, and its checkpoints were trained with the run's "
            f"values. To resume {name}, set these back in 1 · Setup & split (the button "
            "'Use its settings in Setup' copies the run's); to train with them, start a new run. A resume "
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
