"""2 · Train: the dashboard of the followed run; start, stop, resume, train more, export.

The form becomes a TrainConfig and a command line in distcore.forms; the job limit is
distcore.joblimit's; the resume rules are TrainConfig's (forms.check_same_setup words them).
"""

from __future__ import annotations

import shutil
import tempfile
import time

import gradio as gr

from distcore import explain, follow, forms, joblimit, jobs, plots, runs
from distcore.config import DistcoreError

from . import trainapi, watch
from .format import error_md
from .hosting import gradio_room
from .settings import AppSettings
from .setup import LIVE, train_form, training_fields

REPEAT_SECONDS = 5  # a second Start with an empty name and the same form this soon is the same click
CONFIRM_SECONDS = 10  # a second Stop this soon stops a run this page did not start


def start_run(settings: AppSettings, lock, run_name, *form, engine="local"):
    """Start a training run in the background; `engine` starts 2+ worker processes (forms.pick_engine).
    Returns (message, run dropdown update)."""
    try:
        name = runs.check_name(run_name) if run_name else None
        cfg = forms.train_config(settings.gpus, *form, offer=settings.offer)
        engine = forms.pick_engine(engine, cfg.workers, settings.offer)
        # The limit check and the launch do not interleave, between this app's sessions (lock)
        # or with other apps on the same runs folder (joblimit's lock file).
        with lock, joblimit.slot(settings.runs_root, settings.max_jobs):
            name = name or runs.claim_new_name(settings.runs_root)
            pid = jobs.start_training(
                settings.runs_root,
                name,
                forms.train_args(cfg),
                workers=cfg.workers,
                engine=engine,
                ray_address=settings.offer.ray_address,
            )
    except DistcoreError as e:
        return error_md(e), gr.skip()
    where = forms.where_trained(cfg.devices, cfg.workers, engine)
    msg = (
        f"Started **{name}** (process {pid}) on {where}; "
        f"{cfg.total_steps()} steps. It runs in the background: you can close this page."
    )
    return msg, watch.run_dropdown(settings, name)


def start_click(settings: AppSettings, lock, recent, run_name, *form, engine="local"):
    """The Start button: start_run, except that a repeat click (empty name, same form and engine,
    within REPEAT_SECONDS of this session's last start) starts nothing. Returns start_run's outputs
    and this session's last start (gr.State)."""
    now = time.time()
    form = [*form, engine]
    if not run_name and recent and recent["form"] == form and now - recent["time"] < REPEAT_SECONDS:
        return (
            f"Already started **{recent['name']}** {now - recent['time']:.0f} s ago with these "
            "settings; this click started nothing.",
            gr.skip(),
            recent,
        )
    message, dropdown = start_run(settings, lock, run_name, *form[:-1], engine=engine)
    if isinstance(dropdown, dict) and dropdown.get("value") and not run_name:
        recent = {"name": dropdown["value"], "form": form, "time": now}
    return message, dropdown, recent


def claiming(settings: AppSettings, handler):
    """A Start or Resume handler that also keeps, in this session's list `mine` (its first
    argument, returned last), the run it started (the run picker's new value) with the process
    it started: [name, pid]. A claim names the process, so it ends with that process: a later
    resume of the run, by another user or the CLI, is not this page's."""

    def claim(mine, *args, **options):
        out = handler(*args, **options)
        started = out[1].get("value") if isinstance(out[1], dict) else None  # gr.skip(): nothing started
        if not started:
            return (*out, mine)
        return (*out, [*(mine or []), [started, jobs.launched_pid(runs.safe_run_dir(settings.runs_root, started))]])

    return claim


def stop_click(settings: AppSettings, mine, armed, name):
    """Stop training: at once for a run this page started or resumed, while that process
    trains it; any other asks for a second click within CONFIRM_SECONDS, since a fresh page
    follows the newest running run, which may be another user's. Returns (message, armed)."""
    now = time.time()
    confirmed = bool(armed) and armed["name"] == name and now - armed["time"] < CONFIRM_SECONDS
    if confirmed or name not in jobs.active_runs(settings.runs_root) or started_here(settings, mine, name):
        return stop_run(settings, name), None
    return (
        f"**{name}** was not started from this page since it opened: it may be another page's or another "
        "user's run. To stop it, "
        f"press **Stop training** again within {CONFIRM_SECONDS} s.",
        {"name": name, "time": now},
    )


def started_here(settings: AppSettings, mine, name) -> bool:
    """Whether the process now training run `name` is one this page started."""
    try:
        pid = jobs.job_pid(runs.safe_run_dir(settings.runs_root, name))
    except DistcoreError:
        return False
    return pid is not None and [name, pid] in (mine or [])


def stop_run(settings: AppSettings, name) -> str:
    try:
        run_dir = watch.run_dir_of(settings, name)
        if not jobs.stop_training(run_dir):
            return error_md(f"run {name!r} is not training, so there is nothing to stop.")
    except DistcoreError as e:
        return error_md(e)
    if (runs.read_status(run_dir) or {}).get("state") != "running":
        return explain.before_training_stop(name, runs.list_checkpoints(run_dir))
    return f"Stopping **{name}**: {explain.stop_point(runs.shown_config(run_dir)[0])}"


def resume_run(settings: AppSettings, lock, name, *form, engine="local"):
    """Continue a run from its latest checkpoint with the Setup form's resumable fields
    (forms.FORM_RESUMABLE: a max steps of 0 or empty lifts the limit) and its engine (the run folder
    is the same on either, so a run started on Ray may resume on local processes, or back). A form
    that differs from the run in any other field is refused before any process starts, so a resume
    never quietly trains with settings other than the ones the form shows."""
    try:
        run_dir = watch.run_dir_of(settings, name)
        saved = runs.saved_config(run_dir)
        wanted = forms.resumed_config(
            run_dir.name, saved, forms.train_config(settings.gpus, *form, offer=settings.offer)
        )
        engine = forms.pick_engine(engine, wanted.workers, settings.offer)
        runs.resume_config(run_dir, forms.resumable_values(wanted))  # as the CLI checks it
        # A run still training is refused before the job limit, which counts its process too.
        with lock, joblimit.slot(settings.runs_root, settings.max_jobs, busy=run_dir):
            pid = jobs.start_training(
                settings.runs_root,
                run_dir.name,
                forms.resume_args(wanted),
                resume=True,
                workers=wanted.workers,
                engine=engine,
                ray_address=settings.offer.ray_address,
            )
    except (DistcoreError, ValueError) as e:
        return error_md(e), gr.skip()
    saved_ones = runs.list_checkpoints(run_dir)
    where = f"from {saved_ones[-1]}" if saved_ones else "from step 0 (it has no checkpoint yet)"
    changed = forms.resume_changes(saved, wanted)
    changes = f", with {', '.join(changed)}" if changed else ""
    changes += " on Ray" if engine == "ray" else ""
    return (
        f"Resuming **{run_dir.name}** {where}{changes}; {wanted.total_steps()} steps in all (process {pid}).",
        watch.run_dropdown(settings, run_dir.name),
    )


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
    """The "Use its settings in Setup" button: (message, the Setup form's fields in
    forms.TRAIN_FORM order) filled in from the run's config.json, so that Resume is not refused
    for a field that differs, and a new run can start from a copy."""
    try:
        run_dir = watch.run_dir_of(settings, name)
        cfg = runs.saved_config(run_dir)
    except (DistcoreError, ValueError) as e:
        return error_md(e), *[gr.skip()] * len(forms.TRAIN_FORM)
    count, boxes = form_devices(settings, cfg.devices) if cfg.workers == 1 else (gr.skip(), gr.skip())
    notes = (
        []
        if count is not None
        else [
            f"its devices ({forms.shown('devices', cfg.devices)}) are not offered "
            "here, so the device choice is unchanged"
        ]
    )
    if cfg.l2:
        notes.append(f"its L2 weight ({cfg.l2}) has no field here; Resume keeps it, a new run trains without it")
    values = forms.form_values(cfg, settings.offer)
    missing = forms.not_offered(values, settings.offer)
    if "data" in missing:
        missing["upload"] = values["upload"]  # (the upload field goes with the data choice)
    notes += [
        f"its {key} ({forms.shown(key, value)}) is not offered here, so that choice is unchanged"
        for key, value in missing.items()
        if key != "upload"
    ]
    fields = [
        gr.skip() if count is None else count,
        gr.skip() if boxes is None else boxes,
        *(gr.skip() if key in missing else values[key] for key, _ in forms.TRAIN_FORM[2:]),
    ]
    extra = f" Note: {'; '.join(notes)}." if notes else ""
    return (
        f"The form now holds run **{run_dir.name}**'s settings: raise Epochs and **Resume**, or name a copy and "
        f"**Start training**."
        f"{extra}",
        *fields,
    )


def export_run(settings: AppSettings, run):
    """Write the run's metrics CSV and a copy of config.json to a fresh temp folder."""
    try:
        run_dir = watch.run_dir_of(settings, run)
        runs.read_config(run_dir)
        out = runs.export_folder()
        csv_path = plots.metrics_csv(runs.read_metrics(run_dir), out / f"{run_dir.name}-metrics.csv")
        config_path = out / f"{run_dir.name}-config.json"
        shutil.copyfile(run_dir / "config.json", config_path)
        full = gradio_room(csv_path.stat().st_size + config_path.stat().st_size)
    except OSError as e:  # a full temporary folder, said in place of Gradio's bare "Error"
        return None, error_md(f"cannot write the export in {tempfile.gettempdir()}: {e.strerror or e}.")
    except DistcoreError as e:
        return None, error_md(e)
    if full:
        return None, error_md(f"cannot hand the export to the browser: {full}")
    return [str(csv_path), str(config_path)], f"Exported **{run_dir.name}**: metrics CSV and config.json."


def settings_summary(settings: AppSettings, *form, engine="local") -> str:
    """The training fold's label: what Start trains, in one line (or what is wrong with the form)."""
    try:
        cfg = forms.train_config(settings.gpus, *form, offer=settings.offer)
        engine = forms.pick_engine(engine, cfg.workers, settings.offer)
        return gr.update(label="Training: " + forms.summary(cfg, settings.offer, engine))
    except DistcoreError as e:
        return gr.update(label=f"Training settings: {e}")


# Long enough to watch and stop (about 30 s on 2 cores), with an epoch point every few seconds;
# no step limit and checkpoints at epoch ends, whatever the form held before.
QUICK_DEMO = {
    "task": "classifier",
    "data": "fashion-mnist",
    "model": "cnn",
    "epochs": 10,
    "max_steps": 0,
    "steps_per_loop": 5,
    "ckpt_every": 0,
    "train_examples": 16000,
    "test_examples": 1000,
}


def build(settings: AppSettings, lock, setup: dict, bind, timer: gr.Timer) -> dict:
    """The dashboard: status and progress, the buttons, the plots; the settings folded below."""
    ui = {}
    ui["status"] = gr.Markdown("No run selected yet.", elem_id="dc-status")
    with gr.Row(equal_height=True):
        # allow_custom_value: after an app restart an open page's timer sends the run it shows,
        # which the new server's (still empty) choices would refuse with an error popup.
        ui["run"] = gr.Dropdown(choices=[], value=None, label="Run to follow", scale=3, allow_custom_value=True)
        start = gr.Button("Start training", variant="primary", scale=1)
        stop = gr.Button("Stop training", variant="stop", scale=1, interactive=False)
        resume = gr.Button("Resume", scale=1, interactive=False)
        more = gr.Button(f"Train {follow.MORE_EPOCHS} more epoch", scale=1, visible=False)
    ui["message"] = gr.Markdown(elem_classes=LIVE)
    ui["answer"] = gr.JSON(visible=False, label="Answer")
    with gr.Row():
        # No labels: the figures have titles, and on a phone a label covers the plot's toolbar.
        ui["loss_plot"] = gr.Plot(label="Training loss per step", show_label=False, elem_id="dc-loss-plot", scale=2)
        ui["epoch_plot"] = gr.Plot(
            label="Loss and accuracy per epoch", show_label=False, elem_id="dc-epoch-plot", scale=2
        )
        # A task's newest generated images (the GAN's grid): shown only for a run that writes them.
        ui["grid"] = gr.Image(
            label="Generated images, newest",
            format="png",
            interactive=False,
            visible=False,
            height=350,
            scale=1,
            min_width=240,
            elem_id="dc-grid",
            buttons=["download"],
        )
    with gr.Accordion("Training: …", open=False) as fold:
        with gr.Row():
            ui["name"] = gr.Textbox(
                label="New run name", placeholder="empty = run-DATE-TIME", info="ASCII letters, digits, _ . -", scale=2
            )
            demo_preset = gr.Button("Quick demo (CNN, 10 short epochs)", size="sm", scale=1)
            ui["use_settings"] = gr.Button("Use the followed run's settings", size="sm", scale=1)
        training_fields(setup, settings)
    ui["system_plot"] = gr.Plot(label="System", show_label=False, elem_id="dc-system-plot")
    with gr.Accordion("Log", open=False):
        # Tall enough for all of log_text (2 x 12 lines and 2 headings): the newest lines are at the
        # bottom of each part, and a box that scrolls opens at its top, hiding them.
        ui["logs"] = gr.Textbox(label="Latest log lines", lines=8, max_lines=26, elem_id="dc-logs", interactive=False)
    with gr.Accordion("Download this run", open=False):
        export = gr.Button("Export metrics CSV + config.json")
        ui["files"] = gr.File(label="Files", file_count="multiple", interactive=False)
        ui["export_msg"] = gr.Markdown(elem_classes=LIVE)
    refresh = gr.Button("↻ Refresh runs", size="sm", visible=False)
    sig = gr.State(None)  # per session: what the plots currently show
    view = [ui["status"], ui["loss_plot"], ui["epoch_plot"], ui["logs"]]
    panel = [*view, ui["system_plot"], ui["grid"], stop, resume, more]
    recent = gr.State(None)  # per session: its last start with an empty name (start_click)
    mine = gr.State([])  # per session: the runs it started or resumed (claiming)
    armed = gr.State(None)  # per session: a Stop of another run, waiting for its second click
    form = train_form(setup)
    engine = setup["engine"]  # after the form, as the API's /start_training and /resume_training take it
    start.click(
        bind(trainapi.start_training, settings, lock),
        [mine, recent, ui["name"], *form, engine],
        [ui["message"], ui["run"], ui["answer"], recent, mine],
        api_name="start_training",
    )
    stop.click(
        bind(trainapi.stop_training, settings),
        [mine, armed, ui["run"]],
        [ui["message"], ui["answer"], armed],
        api_name="stop_training",
    )
    resume.click(
        bind(trainapi.resume_training, settings, lock),
        [mine, ui["run"], *form, engine],
        [ui["message"], ui["run"], ui["answer"], mine],
        api_name="resume_training",
    )
    more.click(
        bind(trainapi.train_more, settings, lock),
        [mine, ui["run"]],
        [ui["message"], ui["run"], ui["answer"], mine],
        api_name="train_more",
    )

    def run_status(run: str) -> dict:
        """A run's state, progress (0-1) and latest metrics, as JSON."""
        return trainapi.status_record(settings, run)

    gr.api(run_status, api_name="run_status")
    refresh.click(lambda name: watch.run_dropdown(settings, name), ui["run"], ui["run"], api_visibility="private")
    ui["run"].change(bind(watch.run_panel, settings), ui["run"], panel, api_visibility="private")
    # Another run followed, or this one started again: its exported files and the last answer
    # are no longer "this run's".
    ui["run"].change(
        lambda: (None, ""), None, [ui["files"], ui["export_msg"]], show_progress="hidden", api_visibility="private"
    )
    ui["run"].input(lambda: "", None, ui["message"], show_progress="hidden", api_visibility="private")
    timer.tick(
        bind(watch.poll_run, settings),
        [ui["run"], sig],
        [*panel, sig],
        show_progress="hidden",
        concurrency_limit=8,
        api_name="poll_run",
        api_visibility="undocumented",
    )
    timer.tick(
        bind(watch.clear_stale_message, settings),
        [ui["run"], ui["message"]],
        ui["message"],
        show_progress="hidden",
        api_visibility="private",
    )
    ui["labels"] = gr.State(None)  # per session: the run picker's labels (polled with Evaluate's, poll_lists)
    export.click(bind(export_run, settings), ui["run"], [ui["files"], ui["export_msg"]], api_name="export_run")
    # The fold's label says what Start trains, redrawn as any field changes (tab 1's too).
    gr.on(
        [f.change for f in [*form, engine]],
        lambda *values: settings_summary(settings, *values[:-1], engine=values[-1]),
        [*form, engine],
        fold,
        show_progress="hidden",
        queue=False,
        api_visibility="private",
    )
    fold.label = settings_summary(settings, *[f.value for f in form])["label"]
    ui["fold"] = fold
    demo_fields = [setup[k] for k in QUICK_DEMO]
    ui["demo_event"] = demo_preset.click(
        lambda: tuple(QUICK_DEMO.values()), None, demo_fields, show_progress="hidden", api_visibility="private"
    )
    return ui
