"""Which run and checkpoint a page follows, and evaluating a checkpoint a live run may prune.

A page with no run of its own follows a running job, else the newest run that trained, else
the newest run; its Evaluate pickers keep what the user picked, else follow that run and its
newest checkpoint. Runs are read from the runs folder only (see jobs.run_dirs). No TensorFlow.
"""

from __future__ import annotations

from pathlib import Path

from . import jobs, runs
from .config import DistcoreError


def existing_run(runs_root, name) -> Path:
    """The folder of an existing run picked by name; DistcoreError for anything else."""
    if not name:
        raise DistcoreError("choose a run first.")
    run_dir = runs.safe_run_dir(runs_root, name)
    if not run_dir.is_dir():
        raise DistcoreError(f"there is no run named {name!r}.")
    return run_dir


def run_names(runs_root) -> list[str]:
    """Runs with a config.json, plus runs launched from the app that have none (still starting,
    or stopped before training began), newest launch first: one order for all, so a run stopped
    before it began is not pinned first."""
    return [p.name for p in jobs.newest_first(jobs.run_dirs(runs_root))]


def run_label(runs_root, name: str) -> str:
    """'name (state)', the state as the status line shows it."""
    return f"{name} ({jobs.run_state(Path(runs_root) / name)})"


def run_labels(runs_root) -> list[tuple[str, str]]:
    """(label with state, name) for each run, newest first: the run pickers' choices."""
    return [(run_label(runs_root, n), n) for n in run_names(runs_root)]


def default_run(runs_root, labels=None):
    """What a fresh page follows: a running job if any, else the newest run that trained
    (has a config.json: one stopped before it began has nothing to show or evaluate), else
    the newest. `labels` are run_labels already read (no second listing); only a run whose
    label says it trains is checked for a live process."""
    root = Path(runs_root)
    labels = run_labels(root) if labels is None else labels
    names = [name for _, name in labels]
    training = (
        name
        for label, name in labels
        if label.endswith(tuple(f"({s})" for s in runs.ACTIVE_STATES)) and jobs.is_active(root / name)
    )
    trained = (name for name in names if (root / name / "config.json").is_file())
    return next(training, next(trained, names[0] if names else None))


def page_run(runs_root, kept, labels) -> str | None:
    """The run a page opened (or reloaded) follows: the one its browser kept, if it is still
    listed, else a fresh page's (default_run)."""
    return kept if kept in [name for _, name in labels] else default_run(runs_root, labels)


def checkpoint_names(runs_root, name) -> list[str]:
    """A run's checkpoints, oldest first; none for no run or a name that is no run."""
    try:
        return runs.list_checkpoints(runs.safe_run_dir(runs_root, name)) if name else []
    except DistcoreError:
        return []


def evaluate_picks(runs_root, labels, run, checkpoint, chosen=None, followed=None) -> tuple:
    """(run, its checkpoints, checkpoint) the Evaluate pickers show. What the user picked
    (`chosen`: [run, checkpoint or None]) stays picked while it exists. Otherwise they follow
    the run the page follows on 2 · Train (`followed`), else a fresh page's run, and its
    newest checkpoint."""
    chosen_run, chosen_checkpoint = chosen or (None, None)
    keep_run = bool(run) and run == chosen_run
    listed = [name for _, name in labels]
    picked = run if keep_run else followed if followed in listed else default_run(runs_root, labels)
    ckpts = checkpoint_names(runs_root, picked)
    keep_checkpoint = keep_run and checkpoint == chosen_checkpoint and checkpoint in ckpts
    return picked, ckpts, checkpoint if keep_checkpoint else (ckpts[-1] if ckpts else None)


def pruned_while_training(run_dir: Path, checkpoint: str) -> bool:
    """Whether `checkpoint` is gone because the run, still training and keeping only its newest
    few (--keep-checkpoints), deleted it for a newer one."""
    saved = runs.list_checkpoints(run_dir)
    keeps = (runs.read_json(run_dir / "config.json") or {}).get("keep_checkpoints")
    return (
        bool(saved)
        and checkpoint not in saved
        and bool(keeps)
        and jobs.is_active(run_dir)
        and runs.checkpoint_step(checkpoint) < runs.checkpoint_step(saved[-1])
    )


def run_or_newest(run_dir: Path, checkpoint: str, saved: list[str], args: list[str], timeout: float = 900) -> dict:
    """The distcore command `args` (`evaluate`, `export`) on `checkpoint`, or, when a run still
    training has deleted it meanwhile, on the newest, with a note saying so. `saved`: the run's checkpoints
    as listed a moment before. A run keeping 1 to 3 checkpoints usually deletes the one a picker
    named before an evaluation has loaded it, so the newest stands in for it."""
    try:
        if checkpoint not in saved:
            raise DistcoreError(runs.missing_checkpoint(run_dir, checkpoint, saved))
        return jobs.run_cli_json(args + ["--checkpoint", checkpoint], timeout=timeout)
    except DistcoreError:
        if not pruned_while_training(run_dir, checkpoint):
            raise
    result = jobs.run_cli_json(args, timeout=timeout)  # the newest when it is read
    deleted = (
        f"{checkpoint} was deleted by the run, which is still training and keeps only its newest "
        f"checkpoints; this is the newest, {result.get('checkpoint')}."
    )
    result["note"] = " ".join(filter(None, [deleted, result.get("note")]))
    return result


# Epochs a finished run trains on when its page asks for more ("Train 1 more epoch").
MORE_EPOCHS = 1


def run_record(runs_root, name) -> dict:
    """A run's status, progress and latest metrics as plain values (the API's /run_status and the
    buttons' rule read it); DistcoreError for a name that is no run."""
    from . import plots  # plotly: loaded where records are built, not where runs are listed

    run_dir = existing_run(runs_root, name)
    metrics = runs.read_metrics(run_dir)
    p = jobs.job_progress(run_dir, metrics=metrics)
    steps, epochs = plots.step_records(metrics), plots.epoch_records(metrics)
    return {
        "run": p.name,
        "state": p.state,
        "training": p.active and p.state in runs.ACTIVE_STATES,
        "step": p.step,
        "total_steps": p.total_steps or None,
        "progress": round(min(p.step, p.total_steps) / p.total_steps, 4) if p.total_steps else None,
        "epoch": p.epoch,
        "examples_per_sec": p.examples_per_sec,
        "eta_seconds": p.eta_seconds,
        "checkpoints": list(p.checkpoints),
        "has_config": p.has_config,
        "latest_step": latest_step(steps[-1]) if steps else None,
        "latest_epoch": {k: v for k, v in epochs[-1].items() if k != "time"} if epochs else None,
        "message": p.message,
    }


def latest_step(record: dict) -> dict:
    """A step record as /run_status gives it: its step and epoch, and the task's scalars (the
    classifier's loss; the GAN's d_loss and g_loss)."""
    return {**{k: record[k] for k in ("step", "epoch") if k in record}, **runs.record_scalars(record)}


IMAGES = "images"  # a run's generated images (the GAN's grid), step-00000123.png


def latest_image(run_dir) -> Path | None:
    """The newest image a run's task wrote (the GAN's grid at its latest checkpoint or epoch end),
    else None. Names carry the step with leading zeros, so the last name is the newest step."""
    try:
        found = sorted(p for p in (Path(run_dir) / IMAGES).glob("step-*.png") if p.is_file())
    except OSError:
        return None
    return found[-1] if found else None


def run_actions(record: dict | None) -> dict:
    """Which of Stop, Resume and "Train more" the followed run allows: Stop only while its process
    trains it; Resume when it ended early (stopped, failed, died, stalled) and saved its settings;
    "Train more" when it finished (a resume with MORE_EPOCHS more epochs)."""
    if not record:
        return {"stop": False, "resume": False, "more": False}
    training = bool(record["training"])
    ended = not training and record["state"] not in runs.ACTIVE_STATES
    return {
        "stop": training,
        "resume": ended and record["has_config"] and record["state"] != "finished",
        "more": ended and record["has_config"] and record["state"] == "finished",
    }


# The answers to Start and Stop. A resume's answer is not among them: until its process writes
# "starting", the run still reads as it ended, and the answer would go before it holds.
ABOUT_A_RUN = ("Started", "Stopping")


def message_is_stale(message: str | None, name: str | None, record: dict | None) -> bool:
    """Whether the answer to Start or Stop (`message`) about the followed run `name` no longer
    holds: the run has ended since ("Stopping ..." once it stopped, "Started ..." once it
    finished). Other messages (errors, refusals, a resume's answer) stay until the next action."""
    if not message or not name or not any(message.startswith(f"{verb} **{name}**") for verb in ABOUT_A_RUN):
        return False
    return not run_actions(record)["stop"] and bool(record) and record["state"] not in runs.ACTIVE_STATES


def more_epochs_of(run_dir: Path, more: int = MORE_EPOCHS):
    """What "Train more" resumes the run in `run_dir` with (more_epochs_config); DistcoreError for
    a run that has not finished: one that ended early continues with Resume, as it was set up."""
    state = jobs.run_state(run_dir)
    if state != "finished":
        raise DistcoreError(
            f"run {run_dir.name} is {state}, not finished: Train {more} more epoch adds epochs to a finished "
            "run; one that ended early continues with Resume."
        )
    return more_epochs_config(runs.saved_config(run_dir), more)


def more_epochs_config(saved, more: int = MORE_EPOCHS):
    """What "Train more" resumes a finished run with: its own settings, `more` epochs on, and a
    step limit (if it had one) raised by as many epochs' steps, so the limit does not end it again."""
    extra = more * saved.steps_per_epoch()
    return saved.replace(epochs=saved.epochs + more, max_steps=saved.max_steps + extra if saved.max_steps else 0)
