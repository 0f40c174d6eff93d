"""distcore web app: set up, watch and check tf.distribute training from a browser.

Thin by design: layout, event wiring and formatting. Every number shown comes
from distcore, and all TensorFlow work runs in `python -m distcore ...`
subprocesses, so this process never imports TensorFlow.

Run it with `python app.py`; it serves on 127.0.0.1:7860. GRADIO_SERVER_NAME and
GRADIO_SERVER_PORT override that (containers set GRADIO_SERVER_NAME=0.0.0.0).
DISTCORE_RUNS_DIR picks the runs folder, DISTCORE_MAX_JOBS the number of
training jobs allowed at once (default 2).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import html
import json
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from distcore.config import (MAX_GLOBAL_BATCH, MAX_SEED, MAX_SPLIT_EXAMPLES, MODELS, OPTIMIZERS, POLICIES, TRAIN_SIZE,
                             DistcoreError, SplitConfig, TrainConfig, check_int, is_empty)


def server_port() -> int:
    return check_int("GRADIO_SERVER_PORT", os.environ.get("GRADIO_SERVER_PORT", "7860"), low=1, high=65535)


def gradio_temp_dir() -> str | None:
    """A folder of this user's own for Gradio's files when its default is another user's; None
    keeps the default. The first Gradio app on a host makes /tmp/gradio (mode 0755): another
    user's app then failed every Evaluate and Export with a bare "Error" (QA)."""
    if os.environ.get("GRADIO_TEMP_DIR"):
        return None
    try:
        tmp = Path(tempfile.gettempdir())
    except FileNotFoundError as err:  # Gradio's import failed on it with a traceback
        raise DistcoreError(f"{err}. Gradio keeps its files in a temporary folder: set TMPDIR to a folder you "
                            "can write (with a read-only root filesystem, mount one at /tmp).") from None
    shared = tmp / "gradio"
    return str(tmp / f"gradio-{os.getuid()}") if shared.exists() and not os.access(shared, os.W_OK | os.X_OK) else None


if __name__ == "__main__":  # Gradio reads GRADIO_SERVER_PORT with int() as it is imported
    try:
        server_port()
        own_temp = gradio_temp_dir()
        if own_temp:
            os.environ["GRADIO_TEMP_DIR"] = own_temp
    except DistcoreError as e:
        sys.exit(f"error: {e}")

import gradio as gr  # noqa: E402
import numpy as np  # noqa: E402
from gradio import utils as gradio_utils  # noqa: E402
from gradio.blocks import Block  # noqa: E402
from gradio.state_holder import SessionState  # noqa: E402

from distcore import data, jobs, plots, runs  # noqa: E402
from distcore import devices as devmod  # noqa: E402


def _radio_preprocess_taking_numbers_as_text(preprocess):
    """A Radio of whole numbers takes them as text too: gradio_client's view_api lists every
    Radio's choices as text (the device count as Literal['1', ..., '16']), and a script that
    sent "3", as it said, was refused ("not in the list of choices"). On the class: Gradio
    rebuilds a session's component from its arguments when an event updates it, and writes a
    .pyi file beside any module that subclasses one."""
    def taking_text(self, payload):
        if (isinstance(payload, str) and payload.strip().isdigit()
                and all(type(value) is int for _, value in self.choices)):
            payload = int(payload)
        return preprocess(self, payload)
    taking_text.wrapped = preprocess
    return taking_text


def _session_copies_keeping_their_ids(setitem):
    """Gradio 6.31 rebuilds a session's copy of a component whenever an event updates it (a
    gr.skip() too), and the copy gets a new id. The next event that takes it as an input
    then files it under that new id as well (Blocks.preprocess_data: `if block._id not in
    state`), so every timer tick of an open page kept one more component per picker: the app
    grew by about 0.9 MB a minute with two idle pages open, 25 KB a poll. Here the copy keeps
    the id of the component it stands for."""
    def keeping_ids(self, key, value):
        if isinstance(value, Block) and value._id != key:
            value._id = key
        return setitem(self, key, value)
    keeping_ids.wrapped = setitem
    return keeping_ids


# Workarounds for the pinned Gradio, once however often this module is loaded.
if not hasattr(gr.Radio.preprocess, "wrapped"):
    gr.Radio.preprocess = _radio_preprocess_taking_numbers_as_text(gr.Radio.preprocess)
if not hasattr(SessionState.__setitem__, "wrapped"):
    SessionState.__setitem__ = _session_copies_keeping_their_ids(SessionState.__setitem__)

POLICY_CHOICES = tuple((p.upper(), p) for p in POLICIES)
API_CHOICES = (("experimental_distribute_dataset", "dataset"),
               ("distribute_datasets_from_function", "function"))
TOY, FASHION = "toy", "fashion"
NO_STRATEGY, ON_DEVICES = "none", "devices"
MAX_WORKERS = 8
REPEAT_SECONDS = 5  # a second Start with an empty name and the same form this soon is the same click
CONFIRM_SECONDS = 10  # a second Stop this soon stops a run this page did not start

ABOUT = """
**What this is.** A `tf.distribute.MirroredStrategy` custom training loop on Fashion-MNIST.
Without GPUs the CPU is split into N *logical* devices, so N replicas run, sharing the CPU's
cores: each global batch is split into per-replica batches, each replica computes gradients
on its share, and the gradients are summed across replicas. The arithmetic is a GPU run's;
the plumbing differs a little (the sum goes through one device, `ReductionToOneDevice`, as
strategies of different sizes in one process need, and one replica reads its input on the host).

**Where current TensorFlow differs from the tutorials** (TF {tf}, Keras 3):
- `strategy.experimental_run_v2(...)` is gone: it is now **`strategy.run(fn, args=...)`**.
- Keras 3 losses take **`reduction="none"`** (`keras.losses.Reduction` is gone; the tutorials'
  `tf.keras.losses.Reduction.NONE` still works through Keras's legacy module and equals `"none"`);
  the per-example losses are then scaled with `tf.nn.compute_average_loss(...,
  global_batch_size=n)`, n the examples in this global batch (an all-reduce of the replicas'
  counts), so that summing the replicas' gradients gives the global mean. n is the tutorials'
  G for a full batch; their constant G would shrink a partial last batch's loss by n/G.
- Keras 3 no longer refuses a loss's default reduction (`"sum_over_batch_size"`) in a replica, as
  the tutorials say it does: it divides each replica's mean by the number of replicas, which is
  right only when the replicas got equal shares, and fails when one is empty (see 4 · Loss scaling).
- `experimental_distribute_datasets_from_function` is now **`distribute_datasets_from_function`**
  (it still batches by the per-replica size, `ctx.get_per_replica_batch_size(G)`).
- Metrics' `reset_states()` is now **`reset_state()`**.
- With the tutorials' `MirroredStrategy()` on 2+ replicas, a Keras 3 optimizer must be built inside
  the strategy's scope (`optimizer.build(model.trainable_variables)`) before the first step, or it
  fails with "You must feed a value for placeholder tensor". distcore builds it.
- Keras 3 metrics are not trackable, so checkpoints (`tf.train.Checkpoint`: `ckpt-N.index` +
  `.data-*`) hold the training accuracy's variables instead of the metric; as in the
  tutorials, they restore with or without a strategy.

**One choice of distcore's own:** an epoch's *train loss* is the mean over the epoch's examples,
not the tutorials' `total_loss / num_batches`, a mean of the batches' losses that weighs a partial
last batch as a full one (1.314714 against 1.313814 for one epoch of 3,000 examples).

**The batch size you set is the global one.** The tutorials fix the per-replica batch
(`BATCH_SIZE_PER_REPLICA = 64`) and let the global batch grow (`64 × replicas`). Here you set the
global batch and it is divided, so 1, 2 and 4 replicas train on the same batches and their curves
can be compared. For the tutorials' setting on N replicas, set the global batch size to 64 × N.

**How it runs.** Each training run is its own process writing to its run folder
(`{root}`); the page only reads that folder, so a reload or a second browser finds the
run still going. At most {max_jobs} training jobs run at once.
"""


@dataclass(frozen=True)
class AppSettings:
    """What the app was started with; passed to every handler (no module-level state)."""
    runs_root: Path
    max_jobs: int = 2
    gpus: tuple[str, ...] = ()
    max_logical_cpus: int = 16
    tensorflow: str = "unknown"
    poll_seconds: float = 2.0
    device_note: str = ""


def env_max_jobs() -> int:
    return check_int("DISTCORE_MAX_JOBS", os.environ.get("DISTCORE_MAX_JOBS", "2"), low=1)


def make_settings(runs_root=None, max_jobs=None, devices_info: dict | None = None,
                  poll_seconds: float = 2.0) -> AppSettings:
    info = devices_info or fallback_devices()
    root = runs.ready_root(runs_root)
    max_jobs = env_max_jobs() if max_jobs is None else max_jobs
    return AppSettings(
        runs_root=root, max_jobs=max_jobs, gpus=tuple(info.get("gpus") or ()),
        max_logical_cpus=int(info.get("max_logical_cpus") or 16),
        tensorflow=str(info.get("tensorflow", "unknown")), poll_seconds=poll_seconds,
        device_note=str(info.get("error", "")),
    )


def detect_devices() -> dict:
    """Ask `distcore devices` once (in a subprocess); fall back to a CPU-only guess."""
    try:
        return jobs.run_cli_json(["devices"], timeout=180)
    except DistcoreError as e:
        return {**fallback_devices(), "error": f"Could not list devices ({e}); assuming CPU only."}


def fallback_devices() -> dict:
    return {"tensorflow": "unknown", "gpus": [], "cpus": 1, "max_logical_cpus": 16}


# ---------------------------------------------------------------- formatting

def error_md(err) -> str:
    """A message for people, in red. Escaped: it may quote what was typed (a run name of
    `<img src=x onerror=...>` rendered as an image and a live link)."""
    return f"<div class='dc-error' role='alert'>⚠️ <b>{html.escape(str(err), quote=False)}</b></div>"


def eta_text(seconds) -> str:
    if seconds is None:
        return "–"
    seconds = int(max(0, seconds))
    return f"{seconds // 60}m {seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def progress_bar(step: int, total: int) -> str:
    """An HTML progress bar: a screen reader reads it as one (a bar of ▓ and ░ was read out
    block by block; Gradio's Markdown drops aria-hidden)."""
    if not total:
        return ""
    done = min(step, total)
    return f"<progress value='{done}' max='{total}'></progress> {100 * done / total:.0f}%"


# ---------------------------------------------------------------- devices and batch

def selected_devices(settings: AppSettings, cpu_count, gpu_boxes) -> tuple[str, ...]:
    """The device set the user chose: GPU/CPU checkboxes, or N logical CPU devices."""
    if settings.gpus:
        if not gpu_boxes:
            raise DistcoreError("the device set is empty: choose at least one device.")
        return devmod.parse_device_list(",".join(gpu_boxes))
    if not cpu_count:
        raise DistcoreError("the device set is empty: choose how many logical CPU devices to use.")
    return devmod.resolve(replicas=int(cpu_count), gpus=0)


def replica_count(settings: AppSettings, cpu_count, gpu_boxes, workers) -> int:
    """Replicas the form describes: one CPU replica per worker process with 2+ workers."""
    workers = check_int("worker processes", workers, high=MAX_WORKERS)
    return workers if workers > 1 else len(selected_devices(settings, cpu_count, gpu_boxes))


def device_args(names: tuple[str, ...]) -> list[str]:
    return ["--devices", ",".join(names)]


def quotient(a: int, b: int) -> str:
    """'= 0.125' when three decimals say it exactly, else '≈ 3.333' (':.2f' showed 1/8 as 0.12)."""
    text = f"{a / b:.3f}".rstrip("0").rstrip(".")
    return f"= {text}" if float(text) * b == a else f"≈ {text}"


def batch_note(settings: AppSettings, global_batch, cpu_count, gpu_boxes, workers=1) -> str:
    """The per-replica batch next to the global batch, or a plain warning."""
    try:
        replicas = replica_count(settings, cpu_count, gpu_boxes, workers)
        g = check_int("global batch size", global_batch, high=MAX_GLOBAL_BATCH)
    except DistcoreError as e:
        return error_md(e)
    # After the arithmetic, not inside it: "(1 / 2 replicas: one CPU replica per worker process = 0.5)".
    why = ": one CPU replica per worker process" if int(workers) > 1 else ""  # replica_count checked it
    shown = plots.count(replicas, "replica")
    if g % replicas:
        arithmetic = f"({g} / {shown} {quotient(g, replicas)}{why})"
        # "unequal batches" undersold fewer examples than replicas: 4 on 8 left 4 replicas empty at every step (QA)
        empty = replicas - g
        what = (f"**{plots.count(g, 'example')} for {shown}** {arithmetic}: at each step {empty} of them "
                f"{'gets' if empty == 1 else 'get'} an empty batch (still running the step and joining the "
                "all-reduce, adding nothing)"
                if g < replicas else
                f"**{g} does not divide evenly by {shown}** {arithmetic}: replicas will get unequal batches, "
                "and some may get an empty one at every step. How TensorFlow cuts a batch depends on the shard "
                "policy and drop_remainder: 4 over 3 replicas is 2/2/0, or 2/1/1 under FILE and OFF with "
                "drop_remainder")
        # ("refuses it" read as refusing the 2/1/1 cut just named, retest QA)
        return (f"⚠️ {what}. distribute_datasets_from_function refuses a global batch that does not divide evenly. "
                "Press **Show split** to see exactly.")
    return f"Per-replica batch: **{g // replicas}** ({g} / {shown}{why})"


def devices_in_use(workers):
    """The device inputs are ignored with 2+ worker processes (one CPU replica each): grey them out."""
    try:
        single = check_int("worker processes", workers, high=MAX_WORKERS) == 1
    except DistcoreError:
        single = True
    info = ("No GPU here: the CPU is split into this many logical devices, one replica each." if single else
            "Not used with 2+ worker processes: each worker process has one CPU replica.")
    return gr.update(interactive=single, info=info), gr.update(interactive=single)


# ---------------------------------------------------------------- split

def show_split(settings: AppSettings, planner, source, toy_examples, train_examples,
               global_batch, cpu_count, gpu_boxes, policy, api, drop_remainder, files, workers=1, seed=0):
    """Ask the planner how TF splits the dataset; return (figure or None, summary markdown).
    Fashion-MNIST's rows are shown in the order epoch 1 of a run with `seed` reads them."""
    try:
        # Fashion-MNIST has 60,000 training examples: the same check (and words) as Train's.
        examples = (check_int("N (toy dataset size)", toy_examples, high=MAX_SPLIT_EXAMPLES) if source == TOY
                    else check_int("train examples", train_examples, high=TRAIN_SIZE))
        global_batch = check_int("global batch size", global_batch, high=MAX_GLOBAL_BATCH)
        files = check_int("source files", files, low=0, high=64)
        workers = check_int("worker processes", workers, high=MAX_WORKERS)
        shuffle_seed = check_int("seed", seed if seed is not None else 0, low=0, high=MAX_SEED) if source == FASHION else None
        if workers > 1:
            return split_on_workers(workers, examples, global_batch, policy, api, drop_remainder, files,
                                    shuffle_seed)
        names = selected_devices(settings, cpu_count, gpu_boxes)
        cfg = SplitConfig(examples=examples, global_batch=global_batch, devices=names,
                          policy=policy, api=api, drop_remainder=bool(drop_remainder),
                          files=files or 0, shuffle_seed=shuffle_seed)
        if planner.max_replicas and cfg.replicas > planner.max_replicas:
            raise DistcoreError(f"the split planner handles at most {planner.max_replicas} replicas.")
        plan = planner.plan({"examples": cfg.examples, "global_batch": cfg.global_batch,
                             "replicas": cfg.replicas, "policy": cfg.policy, "api": cfg.api,
                             "drop_remainder": cfg.drop_remainder, "files": cfg.files,
                             "shuffle_seed": cfg.shuffle_seed})
    except DistcoreError as e:
        return None, error_md(e)
    plan = {**plan, "devices": list(names)}  # show the user's device names on the columns
    return plots.split_figure(plan), plots.split_summary(plan)


def split_on_workers(workers, examples, global_batch, policy, api, drop_remainder, files, shuffle_seed=None):
    """The plan as W real worker processes see it (10-20 s: each one starts TensorFlow)."""
    SplitConfig(examples=examples, global_batch=global_batch, devices=("cpu:0",), policy=policy, api=api,
                drop_remainder=bool(drop_remainder), files=files or 0, workers=workers, shuffle_seed=shuffle_seed)
    args = ["split", "--workers", str(workers), "--examples", str(int(examples)), "--global-batch",
            str(int(global_batch)), "--policy", policy, "--api", api, "--files", str(int(files or 0))]
    args += ["--drop-remainder"] if drop_remainder else []
    args += ["--shuffle-seed", str(shuffle_seed)] if shuffle_seed is not None else []
    result = jobs.run_cli_json(args, timeout=300)
    plan = plots.combine_worker_plans(result)
    return plots.split_figure(plan), plots.split_summary(plan)


# ---------------------------------------------------------------- training

def train_config(settings, cpu_count, gpu_boxes, global_batch, policy, api, model, optimizer,
                 learning_rate, epochs, max_steps, steps_per_loop, checkpoint_every, seed,
                 train_examples, test_examples, drop_remainder=False, workers=1, keep_checkpoints=0) -> TrainConfig:
    """Validate the form with distcore's own rules (no TensorFlow needed)."""
    workers = check_int("worker processes", workers, high=MAX_WORKERS)
    # Under MultiWorkerMirroredStrategy a CPU-only worker has exactly one replica.
    names = ("cpu:0",) if workers > 1 else selected_devices(settings, cpu_count, gpu_boxes)
    return TrainConfig(
        devices=names, workers=workers, model=model,
        optimizer=optimizer, learning_rate=learning_rate, global_batch=global_batch,
        epochs=epochs, max_steps=max_steps or 0, seed=seed if seed is not None else 0,
        steps_per_loop=steps_per_loop, checkpoint_every=checkpoint_every or 0, policy=policy,
        api=api, train_examples=train_examples, test_examples=test_examples,
        drop_remainder=bool(drop_remainder), keep_checkpoints=keep_checkpoints or 0,
    )


def train_args(cfg: TrainConfig) -> list[str]:
    devices = device_args(cfg.devices) if cfg.workers == 1 else []
    return devices + jobs.options_to_args({
        "global_batch": cfg.global_batch, "epochs": cfg.epochs, "max_steps": cfg.max_steps,
        "seed": cfg.seed, "steps_per_loop": cfg.steps_per_loop,
        "checkpoint_every": cfg.checkpoint_every, "keep_checkpoints": cfg.keep_checkpoints, "model": cfg.model,
        "optimizer": cfg.optimizer, "learning_rate": cfg.learning_rate, "policy": cfg.policy,
        "api": cfg.api, "train_examples": cfg.train_examples, "test_examples": cfg.test_examples,
        "drop_remainder": cfg.drop_remainder,
    })


def check_job_limit(settings: AppSettings) -> None:
    running = jobs.active_runs(settings.runs_root)
    if len(running) >= settings.max_jobs:
        raise DistcoreError(
            f"{len(running)} training job(s) are already running ({', '.join(running)}), and this "
            f"server allows {settings.max_jobs} at a time. Stop one, or wait until one finishes.")


def start_run(settings: AppSettings, lock, run_name, *form):
    """Start a training run in the background. Returns (message, run dropdown update)."""
    try:
        name = runs.check_name(run_name) if run_name else None
        cfg = train_config(settings, *form)
        with lock:  # the limit check and the launch must not interleave between sessions
            check_job_limit(settings)
            name = name or runs.claim_new_name(settings.runs_root)
            pid = jobs.start_training(settings.runs_root, name, train_args(cfg), workers=cfg.workers)
    except DistcoreError as e:
        return error_md(e), gr.skip()
    where = f"{cfg.workers} worker processes" if cfg.workers > 1 else ", ".join(cfg.devices)
    msg = (f"Started **{name}** (process {pid}) on {where}; "
           f"{cfg.total_steps()} steps. It runs in the background: you can close this page.")
    return msg, run_dropdown(settings, name)


def start_click(settings: AppSettings, lock, recent, run_name, *form):
    """The Start button: start_run, except that a repeat click (empty name, same form, within
    REPEAT_SECONDS of this session's last start) starts nothing. Returns start_run's outputs
    and this session's last start (gr.State)."""
    now = time.time()
    if (not run_name and recent and recent["form"] == list(form)
            and now - recent["time"] < REPEAT_SECONDS):
        return (f"Already started **{recent['name']}** {now - recent['time']:.0f} s ago with these "
                "settings; this click started nothing.", gr.skip(), recent)
    message, dropdown = start_run(settings, lock, run_name, *form)
    if isinstance(dropdown, dict) and dropdown.get("value") and not run_name:
        recent = {"name": dropdown["value"], "form": list(form), "time": now}
    return message, dropdown, recent


def run_dir_of(settings: AppSettings, name) -> Path:
    """The folder of an existing run picked by name; DistcoreError for anything else."""
    if not name:
        raise DistcoreError("choose a run first.")
    run_dir = runs.safe_run_dir(settings.runs_root, name)
    if not run_dir.is_dir():
        raise DistcoreError(f"there is no run named {name!r}.")
    return run_dir


def claiming(settings: AppSettings, handler):
    """A Start or Resume handler that also keeps, in this session's list `mine` (its first
    argument, returned last), the run it started, the run picker's new value, with the process
    it started: [name, pid]. By name alone, the claim outlived that process, and one click
    stopped another user's resume of the run, or a CLI's (QA)."""
    def claim(mine, *args):
        out = handler(*args)
        started = out[1].get("value") if isinstance(out[1], dict) else None  # gr.skip(): nothing started
        if not started:
            return (*out, mine)
        return (*out, [*(mine or []), [started, jobs.launched_pid(runs.safe_run_dir(settings.runs_root, started))]])
    return claim


def stop_click(settings: AppSettings, mine, armed, name):
    """Stop training: at once for a run this page started or resumed, while that process
    trains it; any other asks for a second click within CONFIRM_SECONDS. A fresh page follows
    the newest running run, which may be another user's, and one click stopped it (QA).
    Returns (message, armed)."""
    now = time.time()
    confirmed = bool(armed) and armed["name"] == name and now - armed["time"] < CONFIRM_SECONDS
    if confirmed or name not in jobs.active_runs(settings.runs_root) or started_here(settings, mine, name):
        return stop_run(settings, name), None
    return (f"**{name}** was not started from this page: it may be another user's run. To stop it, "
            f"press **Stop training** again within {CONFIRM_SECONDS} s.", {"name": name, "time": now})


def started_here(settings: AppSettings, mine, name) -> bool:
    """Whether the process now training run `name` is one this page started."""
    try:
        pid = jobs.job_pid(runs.safe_run_dir(settings.runs_root, name))
    except DistcoreError:
        return False
    return pid is not None and [name, pid] in (mine or [])


def stop_run(settings: AppSettings, name) -> str:
    try:
        run_dir = run_dir_of(settings, name)
        if not jobs.stop_training(run_dir):
            return error_md(f"run {name!r} is not training, so there is nothing to stop.")
    except DistcoreError as e:
        return error_md(e)
    if (runs.read_status(run_dir) or {}).get("state") != "running":
        return before_training_stop(name, runs.list_checkpoints(run_dir))
    return f"Stopping **{name}**: {stop_point(runs.shown_config(run_dir)[0])}"


# The Setup fields a resume passes on: TrainConfig.RESUMABLE less data_dir, which the form
# does not set. Every other field the form sets must match the run's (check_same_setup).
FORM_RESUMABLE = tuple(k for k in TrainConfig.RESUMABLE if k != "data_dir")
FIELD_LABELS = {"model": "model", "optimizer": "optimizer", "learning_rate": "learning rate",
                "global_batch": "global batch size", "seed": "seed", "policy": "shard policy",
                "api": "input API", "train_examples": "training examples", "test_examples": "test examples",
                "drop_remainder": "drop_remainder", "epochs": "epochs", "max_steps": "max steps",
                "steps_per_loop": "steps per loop", "checkpoint_every": "checkpoint interval",
                "keep_checkpoints": "checkpoints kept",
                "devices": "devices", "workers": "worker processes"}


def stop_point(config: dict) -> str:
    """Where a running run stops: the loop checks for a stop between chunks of Steps per loop
    steps, and a cluster's workers vote on it once per chunk (it said "the current step")."""
    loop = plots.count(int(config.get("steps_per_loop") or 1), "step")
    when = ("once its workers agree, at the end of this loop or at most one loop later"
            if int(config.get("workers") or 1) > 1 else "at the end of the current loop")
    # (A process's first loop is one step, so its first record comes as soon as it is traced:
    # a Stop then landed at step 1, where "steps per loop: 10" had been read as step 10.)
    return (f"it stops {when} (steps per loop: {loop}; a process's first loop is its first step), "
            "saves a checkpoint and exits.")


def before_training_stop(name: str, checkpoints: list[str]) -> str:
    """What a stop before the first step does: a resumed run stops where it resumed from, and
    keeps its checkpoint (it used to be told "exits at step 0 with nothing to save")."""
    if not checkpoints:
        return f"Stopping **{name}**: training has not begun, so it exits at step 0 with nothing to save."
    newest = checkpoints[-1]
    return (f"Stopping **{name}**: it has not resumed training yet, so it exits at step "
            f"{runs.checkpoint_step(newest)}, where it resumed from; its checkpoint {newest} stays.")


def resume_run(settings: AppSettings, lock, name, *form):
    """Continue a run from its latest checkpoint with the Setup form's resumable fields
    (FORM_RESUMABLE: a max steps of 0 or empty lifts the limit). A form that differs from
    the run in any other field is refused before any process starts: Resume used to pass on
    epochs and max steps alone and quietly train the saved model, batch and devices."""
    try:
        run_dir = run_dir_of(settings, name)
        saved = runs.saved_config(run_dir)
        wanted = train_config(settings, *form).replace(l2=saved.l2)  # the form has no L2 field
        check_same_setup(run_dir.name, saved, wanted)
        runs.resume_config(run_dir, {k: getattr(wanted, k) for k in FORM_RESUMABLE})  # as the CLI checks
        with lock:
            jobs.refuse_if_busy(run_dir, run_dir.name)  # before the job limit, which counts this run too
            check_job_limit(settings)
            pid = jobs.start_training(settings.runs_root, run_dir.name, resume_args(wanted),
                                      resume=True, workers=wanted.workers)
    except (DistcoreError, ValueError) as e:
        return error_md(e), gr.skip()
    saved_ones = runs.list_checkpoints(run_dir)
    where = f"from {saved_ones[-1]}" if saved_ones else "from step 0 (it has no checkpoint yet)"
    changed = [f"{FIELD_LABELS[k]} {shown(k, getattr(saved, k))} → {shown(k, getattr(wanted, k))}"
               for k in FORM_RESUMABLE if getattr(saved, k) != getattr(wanted, k)]
    changes = f", with {', '.join(changed)}" if changed else ""
    return (f"Resuming **{run_dir.name}** {where}{changes}; {wanted.total_steps()} steps in all (process {pid}).",
            run_dropdown(settings, run_dir.name))


def check_same_setup(name: str, saved: TrainConfig, wanted: TrainConfig) -> None:
    """Refuse a resume whose form differs from the run outside the resumable fields."""
    differ = wanted.resume_conflicts(saved)
    if differ:
        listed = ", ".join(f"{FIELD_LABELS.get(k, k)} (the run: {shown(k, getattr(saved, k))}, Setup: "
                           f"{shown(k, getattr(wanted, k))})" for k in differ)
        raise DistcoreError(
            f"Setup differs from run {name} in {listed}, and its checkpoints were trained with the run's "
            f"values. To resume {name}, set these back in 1 · Setup & split (the button "
            "'Use its settings in Setup' copies the run's); to train with them, start a new run. A resume "
            "may change only epochs, max steps, steps per loop, checkpoint interval, checkpoints kept, devices and "
            "worker processes.")


# The Setup fields training reads, in train_config's order, each with the TrainConfig field it
# sets (the device choice, two fields, sets `devices`).
TRAIN_FORM = (("count", "devices"), ("boxes", "devices"), ("batch", "global_batch"), ("policy", "policy"),
              ("api", "api"), ("model", "model"), ("optimizer", "optimizer"), ("lr", "learning_rate"),
              ("epochs", "epochs"), ("max_steps", "max_steps"), ("steps_per_loop", "steps_per_loop"),
              ("ckpt_every", "checkpoint_every"), ("seed", "seed"), ("train_examples", "train_examples"),
              ("test_examples", "test_examples"), ("drop", "drop_remainder"), ("workers", "workers"),
              ("ckpt_keep", "keep_checkpoints"))


def form_devices(settings: AppSettings, devices) -> tuple:
    """(count, boxes) updates that select a run's devices, or (None, None) when this app
    cannot offer them (a run on GPUs this machine lacks, more logical CPUs than it allows)."""
    devices = list(devices or ())
    if settings.gpus:
        offered = [*settings.gpus, "cpu:0"]
        return (gr.skip(), devices) if devices and all(d in offered for d in devices) else (None, None)
    if devices == [f"cpu:{i}" for i in range(len(devices))] and 0 < len(devices) <= settings.max_logical_cpus:
        return len(devices), gr.skip()
    return None, None


def load_run_settings(settings: AppSettings, name):
    """The "Use this run's settings" button: (message, the Setup form's fields in _train_form
    order) filled in from the run's config.json, so that Resume is not refused for a field that
    differs, and a new run can start from a copy. Without it the form had to be set by hand."""
    try:
        run_dir = run_dir_of(settings, name)
        cfg = runs.saved_config(run_dir)
    except (DistcoreError, ValueError) as e:
        return error_md(e), *[gr.skip()] * len(TRAIN_FORM)
    count, boxes = form_devices(settings, cfg.devices) if cfg.workers == 1 else (gr.skip(), gr.skip())
    notes = [] if count is not None else [f"its devices ({shown('devices', cfg.devices)}) are not offered here, "
                                          "so the device choice is unchanged"]
    if cfg.l2:
        notes.append(f"its L2 weight ({cfg.l2}) has no field here; Resume keeps it, a new run trains without it")
    values = [gr.skip() if count is None else count, gr.skip() if boxes is None else boxes,
              *(getattr(cfg, field) for _, field in TRAIN_FORM[2:])]
    extra = f" Note: {'; '.join(notes)}." if notes else ""
    return (f"**1 · Setup & split** now holds run **{run_dir.name}**'s settings. Raise Epochs or Max steps "
            f"there and press **Resume** to continue it, or give a new name and **Start training** for a copy."
            f"{extra}", *values)


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


def resume_args(cfg: TrainConfig) -> list[str]:
    """The CLI flags of the resumable fields; all are passed, so a max steps of 0 lifts the limit."""
    devices = device_args(cfg.devices) if cfg.workers == 1 else []
    return devices + jobs.options_to_args({k: getattr(cfg, k) for k in FORM_RESUMABLE
                                           if k not in ("devices", "workers")})


def run_label(settings: AppSettings, name: str) -> str:
    """'name (state)', the state as the status line shows it: a dead run said "(running)"."""
    return f"{name} ({jobs.run_state(settings.runs_root / name)})"


def run_labels(settings: AppSettings) -> list[tuple[str, str]]:
    """(label with state, name) for each run, newest first: the run pickers' choices."""
    return [(run_label(settings, n), n) for n in list_run_names(settings)]


def run_dropdown(settings: AppSettings, value=None):
    """Dropdown update listing the runs (newest first) and their states."""
    labels = run_labels(settings)
    names = [n for _, n in labels]
    if value not in names:
        value = names[0] if names else None
    return gr.update(choices=labels, value=value, info=unlisted_note(settings))


def unlisted_note(settings: AppSettings) -> str:
    unlisted = jobs.unlisted_runs(settings.runs_root)
    if not unlisted:
        return ""
    shown = ", ".join(repr(name) for name in unlisted[:3]) + (f" and {len(unlisted) - 3} more" if len(unlisted) > 3 else "")
    return (f"Not listed: {shown} in the runs folder. Run names take 1-100 ASCII letters, digits, '_', '.' or '-', "
            "starting with a letter or digit: rename the folder, then ↻ Refresh runs.")


def list_run_names(settings: AppSettings) -> list[str]:
    """Runs with a config.json, plus runs launched from here that have none (still starting,
    or stopped before training began), newest launch first. One order for all: runs without
    a config.json used to come first, so one stopped before it began stayed on top for good."""
    return [p.name for p in jobs.newest_first(jobs.run_dirs(settings.runs_root))]


def default_run(settings: AppSettings, labels=None):
    """What a fresh page follows: a running job if any, else the newest run that trained
    (has a config.json: one stopped before it began has nothing to show or evaluate), else
    the newest. `labels` are run_labels already read this tick (no second listing); only a
    run whose label says it trains is checked for a live process."""
    labels = run_labels(settings) if labels is None else labels
    names = [name for _, name in labels]
    training = (name for label, name in labels
                if label.endswith(tuple(f"({s})" for s in runs.ACTIVE_STATES))
                and jobs.is_active(settings.runs_root / name))
    trained = (name for name in names if (settings.runs_root / name / "config.json").is_file())
    return next(training, next(trained, names[0] if names else None))


def run_view(settings: AppSettings, name):
    """(status markdown, loss figure, epoch figure, log text) for one run."""
    if not name:
        return ("No run selected yet: set one up and press **Start training**.",
                plots.loss_figure([]), plots.epoch_figure([]), "")
    try:
        run_dir = run_dir_of(settings, name)
    except DistcoreError as e:
        return error_md(e), plots.loss_figure([]), plots.epoch_figure([]), ""
    metrics = runs.read_metrics(run_dir)
    p = jobs.job_progress(run_dir, metrics=metrics)
    config, damaged = runs.shown_config(run_dir)
    text = status_md(p) + (f"\n\n{error_md(damaged)}" if damaged else config_line(config))
    # The checkpoints on disk, not the log's: one deleted by hand is no longer there to restore.
    saved = [runs.checkpoint_step(c) for c in runs.list_checkpoints(run_dir)]
    l2 = config.get("l2") or 0
    return (text, plots.loss_figure(metrics, saved, l2), plots.epoch_figure(metrics, l2),
            log_text(run_dir, metrics))


def log_text(run_dir: Path, metrics: list[dict], n: int = 12) -> str:
    """The run's events (timestamped, from metrics.jsonl), then the process's own output
    (train.log: the command, then what it printed), each in its own order."""
    events = [event_line(m) for m in metrics if "event" in m][-n:]
    output = jobs.tail_lines(run_dir / jobs.LOG_FILE, n)
    # "(none yet)" for a finished CLI or library run read as if output were still to come (QA).
    missing = ("(none yet)" if (run_dir / jobs.LOG_FILE).exists() else
               "(none: the app keeps the output of the processes it starts; this run's came from the CLI or a "
               "Python program, which printed it where it ran)")
    later = (["(a later process, from the CLI or a Python program, trained this run since; its output is "
              "where it ran)"] if output and jobs.trained_since_by_others(run_dir, metrics) else [])
    return "\n".join(["── events ──", *(events or ["(none yet)"]),
                      "── process output (train.log) ──", *(output or [missing]), *later])


def event_line(m: dict) -> str:
    stamp = time.strftime("%H:%M:%S", time.localtime(m.get("time", 0)))
    text = m.get("message") or m.get("checkpoint") or ""
    return f"[{stamp}] {m['event']} at step {m.get('step', '?')}: {text}".rstrip(": ")


def config_line(c: dict) -> str:
    """The run's setup in one line (empty until config.json exists)."""
    if not c:
        return ""
    return (f"\n\nSetup: {c.get('model')} · {c.get('optimizer')} · learning rate "
            f"{c.get('learning_rate')} · global batch {c.get('global_batch')} on {where_trained(c)} · "
            f"policy {str(c.get('policy')).upper()} · "
            f"input API {c.get('api')} · {c.get('train_examples')} training / "
            f"{c.get('test_examples')} test examples · seed {c.get('seed')}"
            + (f" · L2 weight {c.get('l2')} (in the loss)" if c.get("l2") else ""))


def where_trained(c: dict) -> str:
    devices = ", ".join(c.get("devices") or [])
    workers = int(c.get("workers") or 1)
    return f"{workers} worker processes ({devices} each)" if workers > 1 else devices


def status_md(p: jobs.Progress) -> str:
    what = "last loop" if p.live_speed else "mean"
    speed = f"{p.examples_per_sec:,.0f} examples/s ({what})" if p.examples_per_sec else "– examples/s"
    total = f" / {p.total_steps}" if p.total_steps else ""
    lines = [f"**{p.name}** · **{p.state}** · step {p.step}{total} · epoch {p.epoch} · "
             f"{speed} · ETA {eta_text(p.eta_seconds)}"]
    if p.total_steps:
        lines.append(progress_bar(p.step, p.total_steps))
    if p.message:
        lines.append(p.message)
    if p.state == "died":
        lines.append("Its training process is gone without writing a final state (killed, or a crash). " + (
            "**Resume** continues from the newest checkpoint" +
            (f" ({p.checkpoints[-1]})." if p.checkpoints else "; it has none, so from step 0.")
            if p.has_config else  # Resume promised "from step 0", and then refused for the missing file
            "It died before it saved its settings (config.json), so there is nothing to resume: start it "
            "again under the same name."))
    if p.checkpoints:
        shown_ones = ", ".join(p.checkpoints[-5:])
        lines.append(f"Checkpoints: {shown_ones}" if len(p.checkpoints) <= 5 else
                     f"Checkpoints ({len(p.checkpoints)}, the newest 5 here; all in 3 · Evaluate): {shown_ones}")
    return "\n\n".join(lines)


def run_signature(settings: AppSettings, name) -> tuple:
    """Changes whenever anything the view shows changes (cheap: stat calls only)."""
    try:
        run_dir = runs.safe_run_dir(settings.runs_root, name)
    except DistcoreError:
        return (name,)
    sig = [name, jobs.is_active(run_dir)]
    for f in ("metrics.jsonl", "status.json", jobs.LOG_FILE, "checkpoints"):
        try:
            st = (run_dir / f).stat()
            sig += [st.st_size, st.st_mtime_ns]
        except OSError:
            sig += [None, None]
    return tuple(sig)


def poll_run(settings: AppSettings, name, last_sig):
    """Timer tick: redraw only when the run directory changed."""
    sig = run_signature(settings, name) if name else (None,)
    if list(sig) == list(last_sig or []):
        return gr.skip(), gr.skip(), gr.skip(), gr.skip(), last_sig
    return (*run_view(settings, name), list(sig))


def poll_lists(settings: AppSettings, last_labels, run, checkpoint, last, chosen=None, followed=None):
    """Timer tick for both run pickers: Train's, and Evaluate's with its checkpoints.
    The runs are listed once a tick for the two (each label reads a status.json).
    `followed` is the run the Train tab follows."""
    labels = run_labels(settings)
    return (*poll_run_list(labels, last_labels),
            *poll_evaluate_lists(settings, labels, run, checkpoint, last, chosen, followed))


def poll_run_list(labels, last_labels):
    """The Train tab's run picker: new labels (name and state) only when they changed."""
    labels = [list(x) for x in labels]  # lists: what gr.State hands back
    if labels == (last_labels or []):
        return gr.skip(), last_labels
    return gr.update(choices=[tuple(x) for x in labels]), labels


def poll_evaluate_lists(settings: AppSettings, labels, run, checkpoint, last, chosen=None, followed=None):
    """The Evaluate tab's run labels (states) and checkpoints, redrawn only when they change.

    What the user picked (`chosen`: [run, checkpoint or None], set by the pickers' input
    events) is kept. Otherwise the pickers follow the run this page follows on 2 · Train
    (`followed`), else the run a fresh page would show (default_run: a running job, else the
    newest run), and its newest checkpoint. (They followed the newest running job: another
    user's, as soon as it started.)
    """
    chosen_run, chosen_checkpoint = chosen or (None, None)
    keep_run = bool(run) and run == chosen_run
    listed = [name for _, name in labels]
    picked = run if keep_run else followed if followed in listed else default_run(settings, labels)
    ckpts = checkpoint_names(settings, picked)
    keep_checkpoint = keep_run and checkpoint == chosen_checkpoint and checkpoint in ckpts
    shown = checkpoint if keep_checkpoint else (ckpts[-1] if ckpts else None)
    seen = [[list(x) for x in labels], picked, ckpts, shown]
    if seen == last:
        return gr.skip(), gr.skip(), last
    return gr.update(choices=labels, value=picked), gr.update(choices=ckpts, value=shown), seen


def export_run(settings: AppSettings, name):
    """Write the run's metrics CSV and a copy of config.json to a fresh temp folder."""
    try:
        run_dir = run_dir_of(settings, name)
        runs.read_config(run_dir)
        out = runs.export_folder()
        csv_path = plots.metrics_csv(runs.read_metrics(run_dir), out / f"{run_dir.name}-metrics.csv")
        config_path = out / f"{run_dir.name}-config.json"
        shutil.copyfile(run_dir / "config.json", config_path)
        full = gradio_room(csv_path.stat().st_size + config_path.stat().st_size)
    except OSError as e:  # a full temporary folder (it was Gradio's bare "Error", QA)
        return None, error_md(f"cannot write the export in {tempfile.gettempdir()}: {e.strerror or e}.")
    except DistcoreError as e:
        return None, error_md(e)
    if full:
        return None, error_md(f"cannot hand the export to the browser: {full}")
    return [str(csv_path), str(config_path)], f"Exported **{run_dir.name}**: metrics CSV and config.json."


def gradio_room(nbytes: int) -> str | None:
    """Why Gradio's temporary folder cannot take `nbytes` more, or None. Gradio copies the
    files of an answer (exports, gallery images) there as it answers, outside this code: on
    a full disk the whole answer failed, a bare "Error" on each output (QA)."""
    folder = Path(gradio_utils.get_upload_folder())
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder) as probe:
            probe.write(bytes(nbytes + 65536))  # with room for Gradio's own folders
            probe.flush()
    except OSError as e:
        return f"Gradio's temporary folder {folder} cannot take them ({e.strerror or e})."
    return None


# ---------------------------------------------------------------- evaluation

def checkpoint_names(settings: AppSettings, name) -> list[str]:
    try:
        return runs.list_checkpoints(runs.safe_run_dir(settings.runs_root, name)) if name else []
    except DistcoreError:
        return []


def checkpoint_dropdown(settings: AppSettings, name):
    ckpts = checkpoint_names(settings, name)
    return gr.update(choices=ckpts, value=ckpts[-1] if ckpts else None)


def evaluate(settings: AppSettings, name, checkpoint, mode, cpu_count, gpu_boxes, followed=None):
    """Restore a checkpoint and evaluate it: (markdown, confusion figure, gallery items).
    No run chosen: the run 2 · Train follows (`followed`), as the picker shows it once filled
    in. Opened after a reload, the tab's pickers filled in only at the next tick, and an
    Evaluate clicked before that said "choose a run first"."""
    try:
        run_dir = run_dir_of(settings, name or followed)
        saved = runs.list_checkpoints(run_dir)
        if not saved:
            raise DistcoreError(runs.no_checkpoint(run_dir))
        # None chosen: the newest, as the dropdown shows it. An Evaluate clicked right after
        # ↻ Refresh can arrive before the refresh has filled the dropdown in.
        checkpoint = checkpoint or saved[-1]
        args = ["evaluate", "--run-dir", str(run_dir), "--details"]
        if mode == NO_STRATEGY:
            args.append("--no-strategy")
        else:
            args += device_args(selected_devices(settings, cpu_count, gpu_boxes))
        result = evaluate_or_newest(run_dir, checkpoint, saved, args)
        gallery = sample_gallery(result.get("samples") or [], result.get("data_dir"))
    except DistcoreError as e:
        return error_md(e), None, []
    full = gradio_room(GALLERY_BYTES) if gallery else None
    if full:  # the result still shows
        gallery = []
        result["note"] = " ".join(filter(None, [result.get("note"), f"The test images are not shown: {full}"]))
    where = "no strategy" if mode == NO_STRATEGY else ", ".join(result.get("devices") or [])
    md = (f"### Accuracy {100 * result['accuracy']:.2f}% · loss {result['loss']:.4f}\n"
          f"{result.get('checkpoint', checkpoint)} (step {result.get('step', '?')}) of "
          f"**{run_dir.name}**, restored with {where}, on {result.get('examples', '?')} test images."
          + (f"\n\nNote: {result['note']}" if result.get("note") else ""))
    fig = plots.confusion_figure(result["confusion"], data.CLASS_NAMES) if result.get("confusion") else None
    return md, fig, gallery


def evaluate_or_newest(run_dir: Path, checkpoint: str, saved: list[str], args: list[str]) -> dict:
    """Evaluate `checkpoint`, or, when a run still training has deleted it (it keeps its newest
    few), the newest, and say so; `saved`: the run's checkpoints as listed a moment before. The
    picker follows the newest: with 1 to 3 kept, the one it named was gone by the time the
    evaluation had loaded, nearly every time (QA)."""
    try:
        if checkpoint not in saved:
            raise DistcoreError(runs.missing_checkpoint(run_dir, checkpoint, saved))
        return jobs.run_cli_json(args + ["--checkpoint", checkpoint], timeout=900)
    except DistcoreError:
        if not pruned_while_training(run_dir, checkpoint):
            raise
    result = jobs.run_cli_json(args, timeout=900)  # the newest when it is read
    deleted = (f"{checkpoint} was deleted by the run, which is still training and keeps only its newest "
               f"checkpoints; this is the newest, {result.get('checkpoint')}.")
    result["note"] = " ".join(filter(None, [deleted, result.get("note")]))
    return result


def pruned_while_training(run_dir: Path, checkpoint: str) -> bool:
    saved = runs.list_checkpoints(run_dir)
    keeps = (runs.read_json(run_dir / "config.json") or {}).get("keep_checkpoints")
    return (bool(saved) and checkpoint not in saved and bool(keeps) and jobs.is_active(run_dir)
            and runs.checkpoint_step(checkpoint) < runs.checkpoint_step(saved[-1]))


GALLERY_BYTES = 16 * 8192  # 16 images of 112x112 grey pixels, as PNG files (1-5 KB each)


def sample_gallery(samples: list[dict], data_dir=None) -> list:
    """(image, caption) pairs for the sample predictions; images from distcore.data."""
    if not samples:
        return []
    test_images = data.load(data_dir, download=False).test_images
    items = []
    for s in samples:
        # Upscale 28x28 -> 112x112 so the browser shows sharp pixels, not a blur.
        image = np.kron(test_images[s["index"]], np.ones((4, 4), dtype=np.uint8))
        items.append((image, gallery_caption(s["predicted"], s["label"])))
    return items


def gallery_caption(predicted: int, label: int) -> str:
    """Short enough for a thumbnail: the true class first, so a cut-off caption still shows it."""
    if predicted == label:
        return f"✓ {data.CLASS_NAMES[label]}"
    return f"✗ {data.CLASS_NAMES[label]} → {data.CLASS_NAMES[predicted]}"


# ---------------------------------------------------------------- loss scaling

def loss_check(settings: AppSettings, cpu_count, gpu_boxes, global_batch, seed, workers=1, examples=None) -> str:
    """One global batch's loss: single device vs distributed vs the tutorial's constant divisor,
    Keras 3's default reduction and two classic mistakes; a partial batch with `examples` < G.
    With 2+ worker processes (one CPU replica each) it runs that many replicas in one process:
    the loss arithmetic is the same, and a cluster is not needed to show it."""
    try:
        workers = check_int("worker processes", workers, high=MAX_WORKERS)
        names = tuple(f"cpu:{i}" for i in range(workers)) if workers > 1 else selected_devices(
            settings, cpu_count, gpu_boxes)
        batch = check_int("global batch size", global_batch, high=MAX_GLOBAL_BATCH)
        args = ["loss-check", *device_args(names), "--global-batch", str(batch),
                "--seed", str(check_int("seed", 0 if seed is None else seed, low=0, high=MAX_SEED))]  # as Setup's
        # 0 or empty: a full batch. (Gradio 6.31 shows an empty Number as 0 and sends 0, so
        # the tab's first click, with the field as it came, was refused.)
        n = 0 if is_empty(examples) else check_int("examples in the batch (0: the global batch size)", examples,
                                                   low=0, high=batch)  # (it said "from 1", though 0 is allowed, QA)
        if n:
            args += ["--examples", str(n)]
        r = jobs.run_cli_json(args, timeout=600)
    except DistcoreError as e:
        return error_md(e)
    rows = [
        ("Single device (reference)", "single_device", None),
        ("Distributed step: compute_average_loss ÷ this batch's examples, SUM over replicas", "distributed",
         "error_distributed"),
        ("The tutorial's constant: compute_average_loss(global_batch_size=G)", "tutorial_fixed_g",
         "error_tutorial_fixed_g"),
        ("Keras 3's default reduction (sum_over_batch_size) in each replica", "keras_default",
         "error_keras_default"),
        ("Mistake: reduce_mean per replica, then SUM", "mistake_reduce_mean", "error_reduce_mean"),
        ("Mistake: a Keras Mean of the replicas' scaled losses", "mistake_keras_mean", "error_keras_mean"),
    ]
    table = "| method | loss | error vs single device |\n|---|---:|---:|\n" + "\n".join(
        loss_row(label, r[key], r.get(err) if err else None) for label, key, err in rows)
    if r.get("keras_default_failure"):  # under the table: in a cell it made the table 945 px wide on a phone
        table += (f"\n\n*Keras 3's default reduction failed: the strategy cannot add up the replicas' results "
                  f"when one is empty ({html.escape(r['keras_default_failure'], quote=False)}).*")
    shares = ", ".join(str(n) for n in r.get("per_replica_examples", []))
    where = (f", as {workers} replicas in one process: the same arithmetic as {workers} worker processes of "
             "one CPU replica each, which need no cluster to show it" if workers > 1 else "")
    partial = (f", a partial batch of {plots.count(r['examples'], 'example')}"
               if r["examples"] < r["global_batch"] else "")
    return (f"**Global batch {r['global_batch']}{partial} on {plots.count(r['replicas'], 'replica')}** "
            f"(examples per replica: {shares}{where})\n\n{table}\n\n{r.get('explanation', '')}")


def loss_row(label: str, value, error) -> str:
    if value is None:  # Keras's default reduction with an empty replica (why: under the table)
        return f"| {label} | fails | – |"
    return f"| {label} | {value:.6f} | {'–' if error is None else f'{error:.2e}'} |"


# ---------------------------------------------------------------- layout

CSS = """
.dc-error { color: #b42318; background: #fef3f2; border: 1px solid #fecdca;
            border-radius: 6px; padding: 8px 12px; }
/* Gradio's dark theme lights up bold text: on the light box it was unreadable (1.01:1). */
.dc-error b { color: inherit; }
.dark .dc-error { color: #fecdca; background: #55160c; border-color: #912018; }
/* Plotly's toolbar: the buttons these plots need (download, zoom, pan, reset). The rest and
   the logo were 10 Tab stops a plot, and at 320 px the logo sat on the title. */
.modebar-btn--logo, .modebar-btn[data-title="Zoom in"], .modebar-btn[data-title="Zoom out"],
.modebar-btn[data-title="Autoscale"], .modebar-btn[data-title="Box Select"],
.modebar-btn[data-title="Lasso Select"] { display: none !important; }
/* A table wider than a 320 px column scrolls rather than clipping its numbers' exponents. */
#dc-loss table { display: block; overflow-x: auto; }
#dc-logs textarea { font-family: monospace; font-size: 12px; }
/* Log lines unwrapped on a phone (it scrolls sideways): wrapped, they overflowed the box,
   which opens at its top, and the newest line was out of sight. */
@media (max-width: 640px) { #dc-logs textarea { white-space: pre; overflow-x: auto; } }
/* Evaluate's device choice is disabled while "No strategy" is chosen: say so by its look. */
#dc-eval-devices-count label:has(input:disabled), #dc-eval-devices-boxes label:has(input:disabled) {
  opacity: 0.45; cursor: not-allowed; }
/* Two test images a row on a phone: at four, a caption's predicted class was cut off. */
@media (max-width: 640px) { #dc-gallery .grid-container { --grid-cols: 2 !important; } }
/* And at 320 px even two a row cut "✗ Shirt → Pul…": there a caption wraps. */
@media (max-width: 400px) { #dc-gallery .caption-label { white-space: normal; } }
/* Nor has a phone room for the ids of 5 or more replicas a row: they ran into each other.
   The cells keep their colours, and a tap shows a cell's ids. */
@media (max-width: 640px) {
  #dc-split:has(.xaxislayer-above > .xtick:nth-of-type(5)) .heatmap-label { display: none; } }
/* Nor for a replica's device under its name, once plotly turns the names upright: the two
   lines of each ran into the next replica's. The hover names the device. */
@media (max-width: 640px) {
  #dc-split:has(.xaxislayer-above > .xtick:nth-of-type(5)) .xtick tspan.line + tspan.line { display: none; }
  /* The loss table's numbers on one line each (they broke into three), its method readable. */
  #dc-loss td:not(:first-child) { white-space: nowrap; }
  #dc-loss td:first-child { min-width: 9em; } }
"""


# The page's own script, run once at load, then at every change of the page (MutationObserver):
# - The answers to a button (a started run, a plan's notes, an evaluation): a screen reader
#   announced none of them, as Gradio's Markdown is no live region. Errors are role="alert".
# - The log box is read-only rather than disabled: disabled, no keyboard could reach it to
#   scroll its long lines on a phone (Gradio sets disabled again at times: that is watched too).
# - Gradio mounts a new Plotly plot at every update of a gr.Plot and drops the old one without
#   Plotly.purge, whose window resize handler then keeps it: a page following a training run
#   grew by about 1,700 DOM nodes and 2.5 MB every 10 s, never freed (QA). Purged, it stays flat.
LIVE = ["dc-live"]
PAGE_SCRIPT = """() => {
  const mark = () => {
    document.querySelectorAll('.dc-live:not([aria-live])').forEach(e => {
      e.setAttribute('role', 'status'); e.setAttribute('aria-live', 'polite'); });
    document.querySelectorAll('#dc-logs textarea[disabled]').forEach(t => { t.disabled = false; t.readOnly = true; });
  };
  const purge = records => records.forEach(r => r.removedNodes.forEach(n => {
    if (!(n instanceof Element) || !window.Plotly) return;
    const plots = n.matches('.js-plotly-plot') ? [n] : [...n.querySelectorAll('.js-plotly-plot')];
    setTimeout(() => plots.filter(g => !g.isConnected).forEach(g => window.Plotly.purge(g)), 0);
  }));
  mark();
  new MutationObserver(records => { mark(); purge(records); }).observe(document.body, {
    childList: true, subtree: true, attributes: true, attributeFilter: ['disabled']});
}"""


def device_inputs(settings: AppSettings, purpose: str = "", elem_id: str = "dc-devices", interactive=True):
    """GPU/CPU checkboxes when GPUs exist, else a choice of logical CPU device count."""
    has_gpus = bool(settings.gpus)
    boxes = gr.CheckboxGroup(
        choices=list(settings.gpus) + ["cpu:0"], value=list(settings.gpus), interactive=interactive,
        label=f"Devices{purpose} (GPUs first)", visible=has_gpus, elem_id=f"{elem_id}-boxes")
    count = gr.Radio(
        choices=list(range(1, settings.max_logical_cpus + 1)), value=2, interactive=interactive,
        label=f"Logical CPU devices{purpose} (= replicas)",
        info="No GPU here: the CPU is split into this many logical devices, one replica each.",
        visible=not has_gpus, elem_id=f"{elem_id}-count")
    return count, boxes


def header_md(settings: AppSettings) -> str:
    devices = ", ".join(settings.gpus) if settings.gpus else (
        f"CPU only, split into up to {settings.max_logical_cpus} logical devices")
    note = f"\n\n{error_md(settings.device_note)}" if settings.device_note else ""
    return (f"# distcore: distributed training with tf.distribute\n"
            f"MirroredStrategy custom training loop on Fashion-MNIST · TensorFlow "
            f"{settings.tensorflow} · devices: {devices} · runs folder `{settings.runs_root}` · "
            f"up to {settings.max_jobs} training jobs at once.{note}")


def build_app(runs_root=None, max_jobs=None, devices_info: dict | None = None,
              planner: jobs.Planner | None = None, poll_seconds: float = 2.0) -> gr.Blocks:
    """The whole UI. devices_info defaults to asking `distcore devices` once."""
    settings = make_settings(runs_root, max_jobs, devices_info or detect_devices(), poll_seconds)
    planner = planner or jobs.Planner()
    lock = threading.Lock()  # shared by this app's sessions: job-limit check + launch
    bind = functools.partial
    # delete_cache: exports and gallery images in Gradio's cache go after a day.
    with gr.Blocks(title="distcore", delete_cache=(3600, 86400)) as demo:
        gr.Markdown(header_md(settings))
        # Outside the tabs: Gradio renders a tab's components once it is first opened, and a
        # timer inside 2 · Train left a page opened straight onto 3 · Evaluate never updated.
        timer = gr.Timer(settings.poll_seconds)
        with gr.Accordion("About: what this shows, and where TensorFlow changed", open=False):
            gr.Markdown(ABOUT.format(tf=settings.tensorflow, root=settings.runs_root,
                                     max_jobs=settings.max_jobs))
        with gr.Tabs() as tabs:
            with gr.Tab("1 · Setup & split", id=TABS[0]) as setup_tab:
                setup = _setup_tab(settings, planner, bind)
            with gr.Tab("2 · Train", id=TABS[1]) as train_tab:
                train = _train_tab(settings, lock, setup, bind, timer)
            with gr.Tab("3 · Evaluate", id=TABS[2]) as evaluate_tab:
                evaluate_ui = _evaluate_tab(settings, bind, followed=train["run"])
            with gr.Tab("4 · Loss scaling", id=TABS[3]) as loss_tab:
                _loss_tab(settings, setup, bind)
        _keep_tab_in_browser(demo, tabs, [setup_tab, train_tab, evaluate_tab, loss_tab])
        # Plotly sizes a plot redrawn in a hidden tab at its default width; a resize event
        # after the tab shows makes it fill its panel again.
        train_tab.select(None, None, None,
                         js="() => { setTimeout(() => window.dispatchEvent(new Event('resize')), 100); }")
        lists = gr.State(None)  # per session: what the Evaluate tab's pickers show
        chosen = gr.State(None)  # per session: the run (and checkpoint) the user picked there
        evaluate_ui["run"].input(lambda name: [name, None], evaluate_ui["run"], chosen)
        evaluate_ui["checkpoint"].input(lambda name, ckpt: [name, ckpt],
                                        [evaluate_ui["run"], evaluate_ui["checkpoint"]], chosen)
        timer.tick(bind(poll_lists, settings),
                   [train["labels"], evaluate_ui["run"], evaluate_ui["checkpoint"], lists, chosen, train["run"]],
                   [train["run"], train["labels"], evaluate_ui["run"], evaluate_ui["checkpoint"], lists],
                   show_progress="hidden", concurrency_limit=8, api_name="poll_lists")
        # Each browser keeps the run it follows, as it keeps its form and tab: a reload (or the
        # page reloading itself after an app restart) followed the newest running job, another
        # user's, one click on Stop away.
        followed = gr.BrowserState(None, storage_key="distcore-run", secret="distcore-run")
        train["run"].change(lambda name: name, train["run"], followed, show_progress="hidden", queue=False)
        demo.load(bind(_on_load, settings), followed,
                  [train["run"], evaluate_ui["run"], evaluate_ui["checkpoint"]], api_name="on_load")
        keep = _keep_setup_in_browser(demo, setup)
        # A form filled in from a run is kept too (.input events fire for typing only).
        train["use_settings"].click(bind(load_run_settings, settings), train["run"],
                                    [train["message"], *_train_form(setup)], api_name="use_run_settings"
                                    ).then(**keep)
    demo.planner = planner  # so main() and tests can close it
    demo.settings = settings
    return demo


def _on_load(settings: AppSettings, kept=None):
    """A page follows the run its browser followed (`kept`), if it is still there; a fresh
    one (or a second browser) the running job, if any (default_run)."""
    labels = run_labels(settings)  # listed once, for both pickers (each label reads a status.json)
    follow = kept if kept in [name for _, name in labels] else default_run(settings, labels)
    pickers = gr.update(choices=labels, value=follow, info=unlisted_note(settings))
    return pickers, pickers, checkpoint_dropdown(settings, follow)


TABS = ("setup", "train", "evaluate", "loss")


def _keep_tab_in_browser(demo: gr.Blocks, tabs: gr.Tabs, tab_list: list) -> None:
    """Each browser keeps the tab it is on, so the page reloading itself after an app restart
    comes back to it: it came back on 1 · Setup & split, away from a run being followed."""
    kept = gr.BrowserState(TABS[0], storage_key="distcore-tab", secret="distcore-tab")
    for tab_id, tab in zip(TABS, tab_list):
        # On the server: a browser-only (js) handler ran as the page loaded, before the kept
        # tab was read, and stored "setup" over it (Gradio selects the first tab on load).
        tab.select(lambda chosen=tab_id: chosen, None, kept, show_progress="hidden", queue=False)
    demo.load(lambda tab_id: gr.Tabs(selected=tab_id) if tab_id in TABS[1:] else gr.skip(), kept, tabs,
              show_progress="hidden")


# The Setup fields a browser keeps across reloads and app restarts.
KEPT_FIELDS = ("count", "boxes", "batch", "policy", "api", "drop", "workers", "model", "optimizer", "lr",
               "seed", "epochs", "max_steps", "steps_per_loop", "ckpt_every", "ckpt_keep", "train_examples",
               "test_examples", "source", "toy_n", "files")


def _keep_setup_in_browser(demo: gr.Blocks, setup: dict) -> dict:
    """Each browser keeps its Setup form in its own localStorage (gr.BrowserState), so a
    reload, or the page reloading itself after an app restart, does not quietly put the
    defaults back under the next Start. The values are settings, not secrets: a fixed key
    lets them outlive a restart (BrowserState's default key is new at every start). Returns the
    keeping event's arguments, for other events that fill in the form."""
    fields = [setup[k] for k in KEPT_FIELDS]
    kept = gr.BrowserState({}, storage_key="distcore-setup", secret="distcore-setup-form")
    # In the browser, not on the server: replies to one event per keystroke could land out of
    # order and keep a value typed before the last one.
    keep = dict(fn=None, inputs=fields, outputs=kept, show_progress="hidden", queue=False,
                js=f"(...values) => Object.fromEntries({json.dumps(KEPT_FIELDS)}.map((k, i) => [k, values[i]]))")
    gr.on([f.input for f in fields], **keep)
    demo.load(form_restorer(dict(zip(KEPT_FIELDS, fields))), kept, fields, show_progress="hidden")
    return keep


def form_restorer(fields: dict):
    """A function from the kept values to the fields' updates: a value this app would not
    offer (another machine's device count, a choice since removed) keeps the default."""
    def fits(field, value) -> bool:
        if isinstance(field, gr.Checkbox):
            return isinstance(value, bool)
        if isinstance(value, bool):  # True is an int to Python, not a device count or a rate
            return False
        if isinstance(field, gr.CheckboxGroup):
            return isinstance(value, list) and all(v in allowed(field) for v in value)
        if isinstance(field, gr.Radio):
            return isinstance(value, (str, int)) and value in allowed(field)
        return value is None or isinstance(value, (int, float))

    def allowed(field) -> list:
        return [v for _, v in field.choices]

    def restore(kept) -> list:
        kept = kept if isinstance(kept, dict) else {}
        return [kept[k] if k in kept and fits(fields[k], kept[k]) else gr.skip() for k in fields]
    return restore


def _setup_tab(settings: AppSettings, planner, bind) -> dict:
    ui = {}
    gr.Markdown("Choose the devices, the batch and the model. **Show split** asks TensorFlow "
                "which examples each replica gets; **2 · Train** uses these settings.")
    with gr.Row():
        with gr.Column():
            gr.Markdown("### Devices and input")
            ui["count"], ui["boxes"] = device_inputs(settings)
            ui["batch"] = gr.Number(value=64, label="Global batch size",
                                    info="examples per step, over all replicas")
            ui["batch_note"] = gr.Markdown(batch_note(settings, 64, 2, list(settings.gpus)))
            ui["policy"] = gr.Radio(list(POLICY_CHOICES), value="auto", label="Shard policy (auto_shard_policy)")
            ui["api"] = gr.Radio(list(API_CHOICES), value="dataset", label="Input API")
            ui["drop"] = gr.Checkbox(value=False, label="drop_remainder (drop the last partial global batch)")
            ui["workers"] = gr.Number(
                value=1, label="Worker processes",
                info="1: MirroredStrategy in one process. 2+: MultiWorkerMirroredStrategy over that many "
                     "processes, one CPU replica each (TF_CONFIG names 127.0.0.1, but TensorFlow's servers "
                     "listen on all interfaces, unauthenticated: see the README); Show split then takes "
                     "10-20 s (every worker process starts TensorFlow)")
        with gr.Column():
            gr.Markdown("### Model and training")
            with gr.Row():
                ui["model"] = gr.Radio(list(MODELS), value="cnn", label="Model")
                ui["optimizer"] = gr.Radio(list(OPTIMIZERS), value="adam", label="Optimizer")
            with gr.Row():
                ui["lr"] = gr.Number(value=0.001, label="Learning rate")
                ui["seed"] = gr.Number(value=0, label="Seed")
            with gr.Row():
                ui["epochs"] = gr.Number(value=1, label="Epochs")
                ui["max_steps"] = gr.Number(value=0, label="Max steps (0 = no limit)")
            with gr.Row():
                ui["steps_per_loop"] = gr.Number(value=20, label="Steps per loop",
                                                 info="steps run inside one tf.function call")
                ui["ckpt_every"] = gr.Number(value=0, label="Checkpoint every N steps",
                                             info="0 = at epoch ends and on stop")
                ui["ckpt_keep"] = gr.Number(value=0, label="Checkpoints kept",
                                            info="the newest N stay on disk; 0 = all")
            with gr.Row():
                ui["train_examples"] = gr.Number(value=60000, label="Training examples",
                                                 info="the first N of 60,000")
                ui["test_examples"] = gr.Number(value=10000, label="Test examples",
                                                info="the first N of 10,000")
    gr.Markdown("### The split: who gets which examples")
    with gr.Row():
        ui["source"] = gr.Radio([("Toy dataset of N ids (0 … N-1)", TOY),
                                 ("Fashion-MNIST training rows, in the order epoch 1 reads them (Seed)",
                                  FASHION)],
                                value=TOY, label="Dataset to split", scale=2)
        ui["toy_n"] = gr.Number(value=150, label="N (toy dataset size)", scale=1)
        ui["files"] = gr.Number(value=0, label="Source files (0 = in memory)",
                                info="FILE sharding needs files", scale=1)
    show = gr.Button("Show split", variant="primary")
    # No label: the figure's title says what it shows, where Gradio's label covered its start.
    ui["split_plot"] = gr.Plot(label="Global batches × replicas", show_label=False, elem_id="dc-split")
    ui["split_text"] = gr.Markdown(elem_classes=LIVE)
    note_inputs = [ui["batch"], ui["count"], ui["boxes"], ui["workers"]]
    for comp in note_inputs:
        comp.change(bind(batch_note, settings), note_inputs, ui["batch_note"],
                    show_progress="hidden", queue=False)
    ui["workers"].change(devices_in_use, ui["workers"], [ui["count"], ui["boxes"]],
                         show_progress="hidden", queue=False)
    show.click(bind(show_split, settings, planner),
               [ui["source"], ui["toy_n"], ui["train_examples"], ui["batch"], ui["count"],
                ui["boxes"], ui["policy"], ui["api"], ui["drop"], ui["files"], ui["workers"], ui["seed"]],
               [ui["split_plot"], ui["split_text"]], concurrency_limit=4, api_name="show_split")
    return ui


def _train_form(setup: dict) -> list:
    return [setup[k] for k, _ in TRAIN_FORM]


def _train_tab(settings: AppSettings, lock, setup: dict, bind, timer: gr.Timer) -> dict:
    ui = {}
    gr.Markdown("Training runs in its own process and keeps going if you close the page. "
                "**Stop training** stops at the end of the current loop of *Steps per loop* steps "
                "(with worker processes, once they agree: at most one loop later) and saves a checkpoint; "
                "**Resume** continues the selected run from its latest checkpoint with the epochs, max "
                "steps (0 = no limit), steps per loop, checkpoint interval, checkpoints kept, devices and "
                "worker processes set in **1 · Setup & split**; its other fields there must match the run's "
                "(**Use its settings in Setup** copies them from the run).")
    with gr.Row():
        ui["name"] = gr.Textbox(label="New run name", placeholder="empty = run-DATE-TIME",
                                info="ASCII letters, digits, _ . - only", scale=2)
        start = gr.Button("Start training", variant="primary", scale=1)
        stop = gr.Button("Stop training", variant="stop", scale=1)
        resume = gr.Button("Resume", scale=1)
    ui["message"] = gr.Markdown(elem_classes=LIVE)
    with gr.Row(equal_height=True):
        # allow_custom_value: after an app restart an open page's timer sends the run it shows,
        # which the new server's (still empty) choices would refuse with an error popup.
        ui["run"] = gr.Dropdown(choices=[], value=None, label="Run to follow", scale=4, allow_custom_value=True)
        refresh = gr.Button("↻ Refresh runs", scale=1)
        ui["use_settings"] = gr.Button("Use its settings in Setup", scale=1)
    ui["status"] = gr.Markdown("No run selected yet.")
    # No labels: the figures have titles, and on a phone a label covered the plot's toolbar.
    ui["loss_plot"] = gr.Plot(label="Training loss per step", show_label=False, elem_id="dc-loss-plot")
    ui["epoch_plot"] = gr.Plot(label="Loss and accuracy per epoch", show_label=False)
    # Tall enough for all of log_text (2 x 12 lines and 2 headings): the newest lines are at the
    # bottom of each part, and a box that scrolls opened at its top, hiding them.
    ui["logs"] = gr.Textbox(label="Latest log lines", lines=8, max_lines=26, elem_id="dc-logs",
                            interactive=False)
    with gr.Accordion("Download this run", open=False):
        export = gr.Button("Export metrics CSV + config.json")
        ui["files"] = gr.File(label="Files", file_count="multiple", interactive=False)
        ui["export_msg"] = gr.Markdown(elem_classes=LIVE)
    sig = gr.State(None)  # per session: what the plots currently show
    view = [ui["status"], ui["loss_plot"], ui["epoch_plot"], ui["logs"]]
    # Explicit api_names: stable endpoints for gradio_client (tests/test_many_users.py).
    recent = gr.State(None)  # per session: its last start with an empty name (start_click)
    mine = gr.State([])  # per session: the runs it started or resumed (claiming)
    armed = gr.State(None)  # per session: a Stop of another run, waiting for its second click
    start.click(claiming(settings, bind(start_click, settings, lock)), [mine, recent, ui["name"], *_train_form(setup)],
                [ui["message"], ui["run"], recent, mine], api_name="start_run")
    stop.click(bind(stop_click, settings), [mine, armed, ui["run"]], [ui["message"], armed], api_name="stop_run")
    resume.click(claiming(settings, bind(resume_run, settings, lock)), [mine, ui["run"], *_train_form(setup)],
                 [ui["message"], ui["run"], mine], api_name="resume_run")
    refresh.click(lambda name: run_dropdown(settings, name), ui["run"], ui["run"],
                  api_name="refresh_runs")
    ui["run"].change(bind(run_view, settings), ui["run"], view, api_name="run_view")
    # Another run followed, or this one started again: its exported files are no longer "this run".
    for changed in (ui["run"].change, start.click, resume.click):
        changed(lambda: (None, ""), None, [ui["files"], ui["export_msg"]], show_progress="hidden")
    timer.tick(bind(poll_run, settings), [ui["run"], sig], [*view, sig],
               show_progress="hidden", concurrency_limit=8, api_name="poll_run")
    ui["labels"] = gr.State(None)  # per session: the run picker's labels (polled with Evaluate's, poll_lists)
    export.click(bind(export_run, settings), ui["run"], [ui["files"], ui["export_msg"]],
                 api_name="export_run")
    return ui


def _evaluate_tab(settings: AppSettings, bind, followed) -> dict:
    ui = {}
    gr.Markdown("Restore a saved checkpoint, without a strategy or on a device set of your "
                "choice, and evaluate it on the run's test set.")
    with gr.Row(equal_height=True):
        ui["run"] = gr.Dropdown(choices=[], value=None, label="Run", scale=3, allow_custom_value=True)
        # allow_custom_value (both): a timer tick can carry the previous run's checkpoint while the
        # choices already list the new run's, which Gradio would refuse with an error popup.
        # evaluate() checks the name itself.
        ui["checkpoint"] = gr.Dropdown(choices=[], value=None, label="Checkpoint", scale=2,
                                       allow_custom_value=True)
        refresh = gr.Button("↻ Refresh", scale=1)
    ui["mode"] = gr.Radio([("No strategy (plain model)", NO_STRATEGY),
                           ("MirroredStrategy on these devices:", ON_DEVICES)],
                          value=NO_STRATEGY, label="Restore with")
    # Greyed out while "No strategy" is chosen: they are not used then.
    ui["count"], ui["boxes"] = device_inputs(settings, " to evaluate on", "dc-eval-devices", interactive=False)
    ui["mode"].change(lambda mode: [gr.update(interactive=mode == ON_DEVICES)] * 2, ui["mode"],
                      [ui["count"], ui["boxes"]], show_progress="hidden", queue=False)
    go_button = gr.Button("Evaluate checkpoint", variant="primary")
    ui["result"] = gr.Markdown(elem_classes=LIVE)
    ui["confusion"] = gr.Plot(label="Confusion matrix")
    # Full width, 4 across (16 images: 4 full rows): a caption as long as "✗ T-shirt/top → Ankle
    # boot" fits under its image. "fit-content", since Gradio gives height="auto" a 550 px box that
    # scrolls on its own. Its caption above it, not as Gradio's label, which on a phone covered
    # the first images' tops.
    gr.Markdown("**Test images**: ✓ right · ✗ true class → predicted")
    ui["gallery"] = gr.Gallery(show_label=False, columns=4, height="fit-content", object_fit="contain",
                               elem_id="dc-gallery")
    ui["run"].change(bind(checkpoint_dropdown, settings), ui["run"], ui["checkpoint"])
    refresh.click(lambda name: run_dropdown(settings, name), ui["run"], ui["run"]).then(
        bind(checkpoint_dropdown, settings), ui["run"], ui["checkpoint"])
    go_button.click(bind(evaluate, settings),
                    [ui["run"], ui["checkpoint"], ui["mode"], ui["count"], ui["boxes"], followed],
                    [ui["result"], ui["confusion"], ui["gallery"]])
    return ui


def _loss_tab(settings: AppSettings, setup: dict, bind) -> None:
    gr.Markdown(
        "With a strategy, each replica sees only its share of the global batch. The loss of one "
        "global batch must come out the same as on a single device: scale per-example losses by "
        "the **global** batch's example count, then SUM over replicas. This runs one global batch "
        "that way and in four others (the tutorial's constant divisor, Keras 3's default "
        "reduction, two classic mistakes), using the devices and global batch from "
        "**1 · Setup & split**. Give fewer examples than the global batch to see a partial last "
        "batch; its pieces show whether a replica is left empty (4 of a batch of 6 on 3 replicas: "
        "2 + 2 + 0).")
    with gr.Row():
        seed = gr.Number(value=0, label="Seed (the initial weights; the batch is the first test images, as many as the next box says)")
        examples = gr.Number(value=0, label="Examples in the batch (0: the global batch size)",
                             info="fewer than the global batch size: a partial last batch")
    button = gr.Button("Check loss scaling", variant="primary")
    result = gr.Markdown(elem_id="dc-loss", elem_classes=LIVE)
    button.click(bind(loss_check, settings), [setup["count"], setup["boxes"], setup["batch"], seed,
                                              setup["workers"], examples], result)


def check_port_free(host: str, port: int) -> None:
    """DistcoreError, in one plain sentence, if (host, port) cannot be listened on."""
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server will
            s.bind((host.strip("[]"), port))
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise DistcoreError(f"port {port} on {host} is already in use; stop whatever "
                                "uses it or set GRADIO_SERVER_PORT to a free port.") from None
        raise DistcoreError(f"cannot listen on {host}:{port} ({e.strerror or e}); check "
                            "GRADIO_SERVER_NAME and GRADIO_SERVER_PORT.") from None


# Gradio keeps each session's component values (figures included) in memory for as long as the
# app runs, closed pages too, up to its default of 10,000 sessions. It drops the least recently
# used beyond this many; an open page's timer keeps its session recent.
SESSIONS_KEPT = 64
M_MMAP_THRESHOLD = -3  # glibc's malloc.h


def keep_large_blocks_off_the_heap() -> None:
    """Have glibc map every block of 128 KiB or more on its own, and unmap it when freed.

    glibc raises that threshold to the size of each large block freed (up to 32 MiB), so
    later ones (an evaluation's test set, 7.8 MB, read for its gallery) came from the heaps of
    Gradio's worker threads and stayed there, fragmented: the app grew by about 9 MB a visit
    (172 -> 353 MB over 20 visits that each showed a split, an evaluation and a loss check;
    Python's own objects grew by 0.2 MB). Setting it keeps it fixed: 175 -> 184 MB over 13."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt(M_MMAP_THRESHOLD, 128 * 1024)
    except (OSError, AttributeError):
        pass  # not glibc (musl, macOS), whose allocators work otherwise


def main() -> None:
    host = os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1")
    try:  # before the slow start-up (device detection), and without a traceback
        port = server_port()
        check_port_free(host, port)
        max_jobs, root = env_max_jobs(), runs.ready_root()
    except DistcoreError as e:
        sys.exit(f"error: {e}")
    keep_large_blocks_off_the_heap()
    signal.signal(signal.SIGTERM, lambda signum, frame: leave_stopping_own_runs(root))
    demo = build_app(root, max_jobs)
    # Warm the split planner up in the background so the first "Show split" is quick.
    threading.Thread(target=_warm_up, args=(demo.planner,), daemon=True).start()
    try:
        demo.queue(default_concurrency_limit=2).launch(
            server_name=host, server_port=port, css=CSS, js=PAGE_SCRIPT, show_error=False,
            state_session_capacity=SESSIONS_KEPT,
        )
    except OSError as e:  # the port was taken after the check above
        sys.exit(f"error: cannot serve on {host}:{port}: {e}")
    finally:
        demo.planner.close()


STOP_WAIT_SECONDS = 600  # beyond the 8 s any run gets, for a run in a long loop: the supervisor's grace decides


def leave_stopping_own_runs(root: Path) -> None:
    """SIGTERM (`docker stop`, a Space's restart, a service manager): the container's end takes
    this app's trainings with it, so they stop first, each with a checkpoint. Ctrl-C leaves
    them training, to be followed again by the next app on this runs folder."""
    print("distcore app: SIGTERM, stopping the runs this app started (each saves a checkpoint) ...",
          file=sys.stderr, flush=True)
    stopped, going = jobs.stop_own_runs(root)
    done = ', '.join(stopped) if stopped else 'no runs'
    if not going:
        print(f"distcore app: stopped {done}; leaving.", file=sys.stderr, flush=True)
        raise SystemExit(128 + signal.SIGTERM)
    # Their loop of steps is longer (Steps per loop, a loaded machine): as PID 1, leaving now
    # would end the container, and them with it, so the supervisor's grace period decides.
    print(f"distcore app: stopped {done}; still finishing their loop of steps: {', '.join(going)}; waiting "
          "for them before leaving (if the container is killed first, they lose the steps since their "
          "last checkpoint).", file=sys.stderr, flush=True)
    late = [name for name in going if not jobs.wait_until_done(root / name, timeout=STOP_WAIT_SECONDS)]
    outcome = f"still training after {STOP_WAIT_SECONDS} s: {', '.join(late)}" if late else "they stopped"
    print(f"distcore app: {outcome}; leaving.", file=sys.stderr, flush=True)
    raise SystemExit(128 + signal.SIGTERM)


def _warm_up(planner: jobs.Planner) -> None:
    try:
        planner.start()
    except DistcoreError:
        pass  # the first "Show split" retries and shows the message


if __name__ == "__main__":
    main()
