"""`distcore.train`: one call to train a task on data in a run folder, from a notebook or a script.

    run = distcore.train(distcore.Classifier(make_model), distcore.Arrays(x, y, xt, yt),
                         run_dir="runs/mine", devices=2, global_batch=32, max_steps=20, seed=1)
    run.records          # metrics.jsonl's records
    distcore.evaluate("runs/mine", devices=None)
    distcore.export("runs/mine", "mine.keras")

It builds the `TrainConfig` (every other field as a keyword: epochs, learning_rate, ...), runs a
`Controller` in this process and returns a `Run`. The run folder is the same as the CLI's and
the app's: they can follow, resume, evaluate and export it.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass
from pathlib import Path

from . import datasets, runs, tasks
from .config import DistcoreError, TrainConfig


@dataclass(frozen=True)
class Run:
    """A trained run: where it is and how it ended; `records` and `config` read its folder."""

    run_dir: Path
    state: str
    step: int
    total_steps: int

    @property
    def records(self) -> list[dict]:
        return runs.read_metrics(self.run_dir)

    @property
    def config(self) -> TrainConfig:
        return runs.saved_config(self.run_dir)


def data_fields(data, run_dir) -> tuple[dict, datasets.Arrays | None]:
    """TrainConfig fields for `data` (None: Fashion-MNIST; "mnist"; an .npz path; an Arrays), and the
    arrays to keep in the run folder."""
    if data is None:
        return {}, None
    if isinstance(data, datasets.Arrays):
        return {"data": datasets.ARRAYS, "train_examples": len(data.y_train), "test_examples": len(data.y_test)}, data
    if isinstance(data, datasets.Datasets):
        return {
            "data": datasets.DATASETS,
            "train_examples": data.train_examples,
            "test_examples": data.test_examples,
        }, data
    if isinstance(data, (str, Path)):
        fields = {"data": str(data)}
        text = str(data).strip().lower()
        if text.endswith(".npz"):
            found = datasets.read_npz(data)
            fields.update(train_examples=len(found.train_labels), test_examples=len(found.test_labels))
        return fields, None
    raise DistcoreError(
        f"data must be distcore.Arrays(x_train, y_train, x_test, y_test), distcore.Datasets(...), 'fashion-mnist', "
        f"'mnist' or the path of an .npz file; not {type(data).__name__}."
    )


def train(
    task=None,
    data=None,
    run_dir=None,
    *,
    devices=2,
    resume: bool = False,
    stop=None,
    on_record=None,
    **settings,
) -> Run:
    """Train `task` (a Task, "classifier", "gan" or module:function; None: the classifier) on
    `data` in `run_dir`.

    `devices`: a replica count or device names ("cpu:0,cpu:1"). `settings`: any other
    TrainConfig field (global_batch, epochs, max_steps, seed, learning_rate, ...).
    `resume=True` continues the run from its newest checkpoint (settings may then change only
    what a resume may: epochs, max_steps, devices, ...), with its own task and model unless
    `task` gives an object (a notebook's own). Returns a `Run`.
    """
    from . import devices as devices_lib
    from .controller import Controller

    if run_dir is None:
        raise DistcoreError("run_dir is missing: name a folder for the run, e.g. run_dir='runs/mine'.")
    known = {field.name for field in dataclasses.fields(TrainConfig)} - {"devices", "task", "data"}
    unknown = sorted(set(settings) - known)
    if unknown:
        close = [m for name in unknown for m in difflib.get_close_matches(name, known, n=1)]
        raise DistcoreError(
            f"train() has no setting {', '.join(unknown)}"
            + (f" (did you mean {', '.join(close)}?)" if close else "")
            + f": the settings are TrainConfig's fields, {', '.join(sorted(known))}."
        )
    given_task, task = task, tasks.coerce("classifier" if task is None else task)
    names = devices_lib.resolve(replicas=devices) if isinstance(devices, int) else devices_lib.resolve(devices=devices)
    if resume:
        given = {**settings, "devices": names}
        config = runs.resume_config(run_dir, given)
        if not isinstance(given_task, tasks.Task):  # the run's own task and model, as `train --resume` rebuilds
            kind = tasks.task_reference(task)[0]
            if given_task is not None and kind != config.task:
                raise DistcoreError(
                    f"run {Path(run_dir).name} trained the task {config.task!r}, not {kind!r}: leave task out to "
                    "resume it with its own."
                )
            task = tasks.from_config(config, runs.run_path(run_dir))
        arrays = data if isinstance(data, datasets.Datasets) else None  # (arrays: the run folder keeps them)
    else:
        fields, arrays = data_fields(data, run_dir)
        kind, model = tasks.task_reference(task)
        defaults = {"task": kind}
        if kind == "classifier":
            defaults["model"] = model
        config = TrainConfig(**{**defaults, **fields, **settings, "devices": names})
    controller = Controller(config, run_dir, resume=resume, stop=stop, on_record=on_record, task=task, data=arrays)
    result = controller.run()
    return Run(Path(run_dir), result["state"], result["step"], result["total_steps"])
