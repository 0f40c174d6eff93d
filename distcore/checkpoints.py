"""Checkpoints: save on a schedule, restore with checks, evaluate on any device set.

Checkpoints are named by their global step (`ckpt-500`), so a name says where in
training it was taken. Restores are checked (`assert_existing_objects_matched`):
a checkpoint from another model is refused, never half-loaded. When the newest
checkpoint is unreadable, `restore_latest` falls back to the newest intact one
and says so; it never silently starts again from step 0.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import re
import shutil
from pathlib import Path

import numpy as np
import tensorflow as tf

from . import runs
from .config import DistcoreError, without_node_names


class Saver:
    """Saves into `folder`; restores from `read_folder` (the chief's, for other workers)."""

    def __init__(
        self,
        checkpoint: tf.train.Checkpoint,
        folder: Path,
        read_folder: Path | None = None,
        keep: int = 0,
        required: tf.train.Checkpoint | None = None,
    ):
        """`keep`: how many of the newest checkpoints stay on disk (0: all). The manager deletes
        older ones as it saves, those of earlier processes of the run too (its state file lists them).
        `required`: what a checkpoint must hold, when `checkpoint` saves more (see restore)."""
        self.checkpoint, self.required = checkpoint, required
        self.folder = Path(folder)
        self.read_folder = Path(read_folder or folder)
        self.manager = tf.train.CheckpointManager(
            checkpoint, str(folder), max_to_keep=keep or None, checkpoint_name="ckpt"
        )
        self.steps = set()  # of the checkpoints this process saved or restored

    def has(self, step: int) -> bool:
        """Whether this process saved or restored the checkpoint of `step`: the same answer on
        every worker of a cluster, as their collectives need (a save runs a test pass). Not a look
        at `folder`: a non-chief's own folder lacks the chief's checkpoint it resumed from, so
        after a resume stopped before its first step worker 1 alone would run the test pass, wait
        in its all-reduce for a chief that had left, and fail the run."""
        return step in self.steps

    def save(self, step: int) -> str:
        try:
            path = self.manager.save(checkpoint_number=step)
        except (OSError, tf.errors.OpError) as err:
            raise DistcoreError(f"could not save a checkpoint in {self.folder}: {file_error(err)}.") from None
        self.steps.add(step)
        return Path(path).name

    def restore_latest(self, on_fallback=lambda message: None) -> str:
        """Restore the newest checkpoint that reads back intact; return its name."""
        for leftover in self.read_folder.glob("*_temp*"):
            shutil.rmtree(leftover, ignore_errors=True)  # a save that was killed half-way
        name = newest_intact(
            self.read_folder, lambda prefix: restore(self.checkpoint, prefix, required=self.required), on_fallback
        )
        self.steps.add(runs.checkpoint_step(name))
        return name


def file_error(err: BaseException) -> str:
    """What the OS said about a failed write ("Operation not permitted"), without what
    TensorFlow wraps it in: "{{function_node __wrapped__SaveV2_..._device_/job:localhost/...}}
    ckpt-10_temp; Operation not permitted [Op:SaveV2]"."""
    if isinstance(err, OSError):
        return err.strerror or str(err)
    text = without_node_names(getattr(err, "message", None) or str(err))
    text = re.sub(r"\s*\[Op:[^\]]*\].*", "", text, flags=re.S).strip()
    text = text.splitlines()[0] if text else ""  # a summary writer adds "\tFailed to flush 11 events to ..."
    return text.rsplit("; ", 1)[-1].strip() or type(err).__name__  # TensorFlow writes "path; reason"


class Mismatch(DistcoreError):
    """A checkpoint that does not fit the model or task it is restored into (not damaged files)."""


class Vanished(DistcoreError):
    """A checkpoint deleted while it was read: a run still training prunes its older ones."""

    def __init__(self, name: str):
        super().__init__(
            f"checkpoint {name} was deleted while it was being read (a run still training deletes "
            "its older checkpoints when it keeps only its newest few: checkpoints kept); try again."
        )


def newest_intact(folder: Path, try_restore, on_fallback, attempts: int = 5) -> str:
    """Call `try_restore` on checkpoints newest first; return the first that works.

    `CheckpointManager` alone would hand back the newest even when it is damaged, and
    a damaged `checkpoint` state file makes it report none (a silent restart from 0):
    so the list comes from the files on disk, and each one is really read. One deleted
    while it was read (the run's own pruning) sends it back to the list, now newer.
    """
    with quiet_unrestored_values():
        for attempt in range(attempts):
            try:
                return newest_intact_once(folder, try_restore, on_fallback)
            except Vanished:
                if attempt == attempts - 1:
                    raise
            gc.collect()  # the failed restore goes now, with its warnings, while they are dropped


class UnrestoredValues(logging.Filter):
    """Drops TensorFlow's warnings of a restore that failed half-way, as its objects go: about
    26 lines of "Value in checkpoint could not be found in the restored object" before a
    correct result, which read as a broken checkpoint. A restore that fails for real says why."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not message.startswith(
            (
                "Value in checkpoint could not be found in the restored object",
                "Detecting that an object or model or tf.train.Checkpoint is being deleted",
            )
        )


@contextlib.contextmanager
def quiet_unrestored_values():
    logger, quiet = tf.get_logger(), UnrestoredValues()
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)


def newest_intact_once(folder: Path, try_restore, on_fallback) -> str:
    names = runs.list_checkpoints(folder.parent)
    problems = []
    recorded = state_file_latest(folder)
    if recorded and recorded not in names:
        problems.append(f"{recorded}: named latest in the checkpoint state file, but its files are gone")
    if not names:
        raise DistcoreError(f"{folder} holds no checkpoint to restore" + (f" ({problems[0]})." if problems else "."))
    mismatches = 0
    for name in reversed(names):
        try:
            try_restore(folder / name)
        except Vanished:
            raise
        except DistcoreError as err:
            problems.append(f"{name}: {str(err).rstrip('.')}")  # joined with "; ", ended once below
            mismatches += isinstance(err, Mismatch)
            continue
        if problems:
            on_fallback(f"restored {name}, the newest intact checkpoint; skipped {'; '.join(problems)}.")
        return name
    if mismatches == len(names):  # intact files, none of which fit: the model or task is not the run's
        raise Mismatch(
            f"no checkpoint of the run fits this model or task, so it is not the one the run trained "
            f"({problems[0]}): give the run's own."
        )
    raise DistcoreError("no checkpoint could be restored: " + "; ".join(problems) + ".")


# How a collective reports a lost peer or an aborted group (TensorFlow 2.21). Restoring under
# MultiWorkerMirroredStrategy runs collectives (variables made by the restore are broadcast), so
# these come from the cluster, not from the files: trying an older checkpoint would only fail the
# same way, after blaming each one.
PEER_ERRORS = (
    tf.errors.UnavailableError,
    tf.errors.CancelledError,
    tf.errors.AbortedError,
    tf.errors.DeadlineExceededError,
)
PEER_SIGNS = ("Collective ops is aborted", "__wrapped__Collective", "unhealthy")


def peer_failure(err: BaseException) -> bool:
    """True for a TensorFlow error that says a peer or a collective failed."""
    text = str(err)
    return isinstance(err, PEER_ERRORS) or (isinstance(err, tf.errors.OpError) and any(s in text for s in PEER_SIGNS))


def restore(
    checkpoint: tf.train.Checkpoint, prefix: Path, partial: bool = False, required: tf.train.Checkpoint | None = None
) -> None:
    """Restore `prefix` into `checkpoint`, refusing a damaged or mismatched checkpoint, each
    called what it is. A peer's failure is raised as TensorFlow raised it (see PEER_ERRORS).
    `required`: the part of `checkpoint` every checkpoint of the run holds; the rest (the states of
    random layers' generators, which older checkpoints lack) is restored where the checkpoint has it."""
    try:
        verify(prefix)  # reads the files alone: what fails here is the files, not the model
    except (ValueError, IndexError, KeyError, tf.errors.OpError) as err:  # damage varies
        if not exists(prefix):
            raise Vanished(prefix.name) from None
        raise DistcoreError(
            f"checkpoint {prefix.name}'s files are damaged or incomplete ({first_line(err)})."
        ) from None
    status = None
    try:
        status = checkpoint.restore(str(prefix))
        if partial:
            status.expect_partial()
        try:
            status.assert_existing_objects_matched()
        except AssertionError:
            if required is None:
                raise
            status.expect_partial()
            status = required.restore(str(prefix))
            status.expect_partial()  # (the values of `checkpoint`'s own are read)
            status.assert_existing_objects_matched()
    except (AssertionError, ValueError, IndexError, KeyError, tf.errors.OpError) as err:  # a mismatch, or a peer
        if status is not None:
            status.expect_partial()  # no second round of "value not found" warnings at exit
        if peer_failure(err):
            raise
        if not exists(prefix):  # deleted while read: not the model's fault
            raise Vanished(prefix.name) from None
        raise Mismatch(f"checkpoint {prefix.name} cannot be restored into this model ({first_line(err)}).") from None


def exists(prefix: Path) -> bool:
    return Path(f"{prefix}.index").is_file()


def first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:300] if text else type(err).__name__


def state_file_latest(folder: Path) -> str | None:
    """The newest checkpoint TensorFlow's `checkpoint` state file names, if it can be read."""
    try:
        state = tf.train.get_checkpoint_state(str(folder))
    except (tf.errors.OpError, ValueError):
        return None
    return Path(state.model_checkpoint_path).name if state and state.model_checkpoint_path else None


def verify(prefix: Path) -> None:
    """Read every tensor of the checkpoint, so a damaged byte anywhere (optimizer slots
    included) fails its checksum now, not in the middle of a later restore."""
    reader = tf.train.load_checkpoint(str(prefix))
    for key in reader.get_variable_to_shape_map():
        reader.get_tensor(key)


def find(run_dir, name: str | None) -> tuple[str, int]:
    """A checkpoint of the run by name (default: the newest), with its step."""
    names = runs.list_checkpoints(run_dir)
    if not names:
        raise DistcoreError(runs.no_checkpoint(run_dir))
    if name is None:
        name = names[-1]
    step = runs.checkpoint_step(name)
    if name not in names:
        raise DistcoreError(runs.missing_checkpoint(run_dir, name, names))
    return name, step


def restored(
    run_dir, name: str | None = None, device_names=None, data_dir=None, task=None, load_data: bool = True, data=None
):
    """A run's task restored from a checkpoint on a device set (None: no strategy, as the
    tutorial restores one), with its test data. Returns a namespace of plain fields:
    runner, strategy, config, data (None unless `load_data`), checkpoint, step, devices, notes."""
    from types import SimpleNamespace

    from . import data as data_lib, datasets, devices, tasks
    from .loop import StepRunner

    config = runs.saved_config(run_dir)
    newest = name is None
    name, step = find(run_dir, name)
    if isinstance(device_names, int) and not isinstance(device_names, bool):
        device_names = devices.resolve(replicas=device_names)
    device_names = None if device_names is None else devices.resolve(devices=device_names)
    strategy = devices.make_strategy(device_names) if device_names else tf.distribute.get_strategy()
    notes = []
    examples = None
    if isinstance(data, datasets.Datasets):
        examples = data
    elif load_data:
        if config.data == "fashion-mnist":
            examples = data_lib.load(
                data_dir or config.data_dir,
                saved_in=None if data_dir else Path(run_dir) / "config.json",
                on_note=notes.append,
            )
        else:
            examples = datasets.load(config.data, data_dir=data_dir or config.data_dir, run_dir=run_dir)
        examples = data_lib.subset(
            examples, min(config.train_examples, len(examples.train_labels)), config.test_examples
        )
    runner = StepRunner(strategy, config, tasks.from_config(config, run_dir, given=task))
    checkpoint, required = runner.checkpoint(), runner.checkpoint(random=False)
    restore_all = lambda prefix: restore(checkpoint, prefix, partial=True, required=required)  # noqa: E731
    if newest:  # "the latest" means the latest that is intact; say so when that is not the newest
        name = newest_intact(Path(run_dir) / "checkpoints", restore_all, notes.append)
        step = runs.checkpoint_step(name)
    else:
        restore_all(Path(run_dir) / "checkpoints" / name)
    return SimpleNamespace(
        runner=runner,
        strategy=strategy,
        config=config,
        data=examples,
        checkpoint=name,
        step=step,
        devices=list(device_names) if device_names else ["no strategy"],
        notes=notes,
    )


def evaluate(
    run_dir,
    name: str | None = None,
    device_names=None,
    details: bool = False,
    data_dir: str | None = None,
    *,
    devices=None,
    task=None,
    data=None,
) -> dict:
    """Restore a checkpoint into a fresh model and measure it on the run's test set.

    `device_names=None` (or `devices=None`) evaluates with no strategy (TensorFlow's default
    strategy: one device, plain calls), as the tutorial's "restore without a strategy"; any other
    value is a device set, read and checked as `devices.resolve` reads one (a count too).
    `data_dir` overrides the run's own (the data moved, or this is another host). `name` is a
    checkpoint such as "ckpt-500" (None: the newest intact one). `task`: the run's Task object,
    for a task no other process can import (a notebook's); `data`: the run's `Datasets`, for a run
    that trained on them. Returns plain values: checkpoint, step,
    devices, examples, data_dir, the task's test metrics without their "test_" prefix (a
    classifier's accuracy and loss; the GAN's d_loss, g_loss and its image grid as a PNG path),
    a note when anything was read from elsewhere than asked, and with `details` a classifier's
    confusion matrix and samples.
    """
    from . import tasks
    from .controller import test_dataset

    chosen = device_names if device_names is not None else devices
    found = restored(run_dir, name, chosen, data_dir, task, data=data)
    runner, config, data = found.runner, found.config, found.data
    tested = runner.run_test(test_dataset(found.strategy, config, data))
    result = {
        "checkpoint": found.checkpoint,
        "step": found.step,
        **{key.removeprefix("test_"): value for key, value in tested.items()},
        "examples": config.test_examples,
        "devices": found.devices,
        "data_dir": getattr(data, "source", None),
        "task": config.task,
    }
    if isinstance(runner.task, tasks.GAN):
        folder = runs.export_folder()
        result["grid"] = str(tasks.write_png(runner.task.grid(), folder / f"grid-{found.checkpoint}.png"))
    if found.notes:
        result["note"] = " ".join(found.notes)
    if details and isinstance(runner.task, tasks.Classifier) and hasattr(data, "test_images"):
        predicted = predictions(runner.task.model, data)
        result["confusion"] = confusion_matrix(data.test_labels, predicted, data.classes)
        result["samples"] = sample_predictions(data.test_labels, predicted, count=SAMPLES)
    return result


SAMPLES = 16  # test images an evaluation with details shows


def predictions(model, data, batch: int = 1000) -> np.ndarray:
    """The model's predicted class of each of the run's test examples (one device, no strategy)."""
    from .model import forward

    out = []
    for start in range(0, len(data.test_labels), batch):
        logits = forward(model, data.transform_x(data.test_images[start : start + batch]), training=False)
        out.append(tf.argmax(logits, axis=1, output_type=tf.int32).numpy())
    return np.concatenate(out) if out else np.zeros([0], np.int32)


def confusion_matrix(labels, predicted, classes: int) -> list[list[int]]:
    """Rows: true class, columns: predicted; a prediction outside the classes is left out."""
    classes = max(classes, 1)
    confusion = [[0] * classes for _ in range(classes)]
    for y, p in zip(labels, predicted):
        if int(p) < classes:
            confusion[int(y)][int(p)] += 1
    return confusion


def sample_predictions(labels, predicted, count: int = SAMPLES) -> list[dict]:
    """`count` test examples to look at, in test-set order within each group: up to half of them
    mistakes from the whole test set, the rest predicted right (more of either when the other runs
    short), so a good model's few mistakes are shown as well as a poor model's right answers."""
    wrong = [i for i in range(len(labels)) if int(predicted[i]) != int(labels[i])]
    right = [i for i in range(len(labels)) if int(predicted[i]) == int(labels[i])]
    mistakes = min(len(wrong), max(count // 2, count - len(right)))
    chosen = wrong[:mistakes] + right[: count - mistakes]
    return [{"index": i, "label": int(labels[i]), "predicted": int(predicted[i])} for i in chosen]


def export(run_dir, out, checkpoint: str | None = None, format: str | None = None, task=None) -> dict:
    """Write a restored checkpoint's model as a Keras file (`.keras`, loadable with
    `keras.models.load_model`, with or without a strategy's scope) or, with format="savedmodel",
    as a TensorFlow SavedModel folder (`tf.saved_model.load`). The classifier's model is written;
    the GAN's generator. Returns {"path", "format", "checkpoint", "step", "task"}."""
    out = Path(out).expanduser().absolute()
    kind = (format or ("keras" if out.suffix == ".keras" else "")).lower()
    if kind not in ("keras", "savedmodel"):
        raise DistcoreError(
            f"export format {format!r} must be keras (a file ending in .keras) or savedmodel (a folder)."
            if format
            else f"{out} must end in .keras for a Keras file; for a SavedModel folder, give format savedmodel."
        )
    if kind == "keras" and out.suffix != ".keras":
        raise DistcoreError(f"a Keras file's name must end in .keras (Keras 3 requires it): not {out.name}.")
    empty_folder = out.is_dir() and kind == "savedmodel" and not any(out.iterdir())
    if out.exists() and not empty_folder:
        raise DistcoreError(f"{out} already exists: choose a new name (an export never overwrites a file).")
    found = restored(run_dir, checkpoint, None, task=task, load_data=False)
    model = found.runner.task.export_model()
    out.parent.mkdir(parents=True, exist_ok=True)
    if kind == "keras":
        model.save(out)
    else:
        model.export(str(out), format="tf_saved_model", verbose=False)
    return {
        "path": str(out),
        "format": kind,
        "checkpoint": found.checkpoint,
        "step": found.step,
        "task": found.config.task,
    }
