"""2 · Train's actions as the API calls them: /start_training, /stop_training, /resume_training,
/train_more and /run_status. The page's buttons call these too, so a caller gets the page's
validation and messages, and its answer also as plain values."""

from __future__ import annotations

import functools

import gradio as gr

from distcore import follow, forms, jobs
from distcore.config import DistcoreError

from . import train, watch  # (train's functions are read at call time: it imports this module)
from .format import error_md, is_error, plain_text
from .settings import AppSettings


def answer(message: str, **values) -> dict:
    """An answer as plain values for the API: ok, the page's message as text, and `values`."""
    return {"ok": not is_error(message), "message": plain_text(message), **values}


# The page's Start, Stop and Resume are the API's /start_training, /stop_training and
# /resume_training: named parameters (the form's fields, then the engine; the State first, which
# the API leaves out), the page's answer, and that answer as plain values.
def start_training(
    settings: AppSettings,
    lock,
    mine,
    recent,
    run_name,
    replicas,
    gpus,
    global_batch,
    shard_policy,
    input_api,
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
    drop_remainder,
    workers,
    checkpoints_kept,
    task="classifier",
    data="fashion-mnist",
    upload=None,
    engine="local",
):
    form = list(locals().values())[5:-1]
    message, dropdown, recent, mine = train.claiming(settings, functools.partial(train.start_click, settings, lock))(
        mine, recent, run_name, *form, engine=engine
    )
    started = dropdown.get("value") if isinstance(dropdown, dict) else None
    return message, dropdown, answer(message, run=started), recent, mine


def stop_training(settings: AppSettings, mine, armed, run):
    message, armed = train.stop_click(settings, mine, armed, run)
    return message, answer(message, run=run, confirm=bool(armed)), armed


def resume_training(
    settings: AppSettings,
    lock,
    mine,
    run,
    replicas,
    gpus,
    global_batch,
    shard_policy,
    input_api,
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
    drop_remainder,
    workers,
    checkpoints_kept,
    task="classifier",
    data="fashion-mnist",
    upload=None,
    engine="local",
):
    form = list(locals().values())[4:-1]
    message, dropdown, mine = train.claiming(settings, functools.partial(train.resume_run, settings, lock))(
        mine, run, *form, engine=engine
    )
    return message, dropdown, answer(message, run=run), mine


def train_more(settings: AppSettings, lock, mine, run):
    """Resume a finished run with follow.MORE_EPOCHS more epochs, its own settings otherwise, on the
    engine the app last launched it on (Ray where it still is installed, else local processes)."""
    try:
        run_dir = watch.run_dir_of(settings, run)
        cfg = follow.more_epochs_of(run_dir)
    except (DistcoreError, ValueError) as e:
        return error_md(e), gr.skip(), answer(error_md(e), run=run), mine
    count = len(cfg.devices) if not settings.gpus else None
    boxes = list(cfg.devices) if settings.gpus else []
    values = forms.form_values(cfg, settings.offer)
    form = [count, boxes, *(values[key] for key, _ in forms.TRAIN_FORM[2:])]
    engine = jobs.launched_engine(run_dir) if settings.offer.ray else "local"
    message, dropdown, mine = train.claiming(settings, functools.partial(train.resume_run, settings, lock))(
        mine, run, *form, engine=engine
    )
    return message, dropdown, answer(message, run=run), mine


def status_record(settings: AppSettings, run) -> dict:
    """The API's /run_status: a run's state, progress and latest metrics (follow.run_record)."""
    try:
        return {"ok": True, **follow.run_record(settings.runs_root, run)}
    except DistcoreError as e:
        return {"ok": False, "message": str(e), "run": run}
