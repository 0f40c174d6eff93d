"""The run a page follows: its status, plots and log, redrawn as its folder changes, and the run
and checkpoint pickers of 2 · Train and 3 · Evaluate. Which run to follow is distcore.follow's
rule; this module shows it."""

from __future__ import annotations

import gradio as gr

from distcore import follow, jobs, plots, runs
from distcore.config import DistcoreError

from .format import config_line, error_md, log_text, status_md
from .settings import AppSettings


def run_dir_of(settings: AppSettings, name):
    """The folder of an existing run picked by name; DistcoreError for anything else."""
    return follow.existing_run(settings.runs_root, name)


def unlisted_note(settings: AppSettings) -> str:
    unlisted = jobs.unlisted_runs(settings.runs_root)
    if not unlisted:
        return ""
    more = f" and {len(unlisted) - 3} more" if len(unlisted) > 3 else ""
    shown = ", ".join(repr(name) for name in unlisted[:3]) + more
    return (
        f"Not listed: {shown} in the runs folder. Run names take 1-100 ASCII letters, digits, '_', '.' or '-', "
        "starting with a letter or digit: rename the folder, then ↻ Refresh runs."
    )


def run_dropdown(settings: AppSettings, value=None):
    """Dropdown update listing the runs (newest first) and their states."""
    labels = follow.run_labels(settings.runs_root)
    names = [n for _, n in labels]
    if value not in names:
        value = names[0] if names else None
    return gr.update(choices=labels, value=value, info=unlisted_note(settings))


def checkpoint_dropdown(settings: AppSettings, name):
    ckpts = follow.checkpoint_names(settings.runs_root, name)
    return gr.update(choices=ckpts, value=ckpts[-1] if ckpts else None)


def run_view(settings: AppSettings, name):
    """(status markdown, loss figure, epoch figure, log text) for one run."""
    if not name:
        return (
            "No run selected yet: set one up and press **Start training**.",
            plots.loss_figure([]),
            plots.epoch_figure([]),
            "",
        )
    try:
        run_dir = run_dir_of(settings, name)
    except DistcoreError as e:
        return error_md(e), plots.loss_figure([]), plots.epoch_figure([]), ""
    metrics = runs.read_metrics(run_dir)
    p = jobs.job_progress(run_dir, metrics=metrics)
    config, damaged = runs.shown_config(run_dir)
    setup = f"\n\n{error_md(damaged)}" if damaged else config_line(config, jobs.launched_engine(run_dir))
    text = status_md(p) + setup
    # The checkpoints on disk, not the log's: one deleted by hand is no longer there to restore.
    saved = [runs.checkpoint_step(c) for c in runs.list_checkpoints(run_dir)]
    l2 = config.get("l2") or 0
    return (text, plots.loss_figure(metrics, saved, l2), plots.epoch_figure(metrics, l2), log_text(run_dir, metrics))


def run_panel(settings: AppSettings, name):
    """run_view, then the system figure and the buttons the followed run allows (follow.run_actions):
    (Stop, Resume, Train more) updates."""
    try:
        record = follow.run_record(settings.runs_root, name) if name else None
        samples = runs.read_system(runs.safe_run_dir(settings.runs_root, name)) if record else []
    except DistcoreError:
        record, samples = None, []
    allowed = follow.run_actions(record)
    return (
        *run_view(settings, name),
        plots.system_figure(samples),
        grid_update(settings, name if record else None),
        gr.update(interactive=allowed["stop"]),
        gr.update(interactive=allowed["resume"], visible=not allowed["more"]),
        gr.update(visible=allowed["more"]),
    )


def grid_update(settings: AppSettings, name):
    """The newest image the run's task wrote (the GAN's grid), shown; hidden for a run with none.
    Read here, as the runs folder may lie where Gradio serves no file from."""
    path = follow.latest_image(runs.safe_run_dir(settings.runs_root, name)) if name else None
    image = read_image(path) if path else None
    if image is None:
        return gr.update(value=None, visible=False)
    return gr.update(value=image, visible=True, label=f"Generated images, step {int(path.stem.split('-')[-1]):,}")


def read_image(path):
    """A PNG as a PIL image, read whole (its file may be replaced meanwhile); None if unreadable."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            image.load()
            return image.copy()
    except (OSError, UnidentifiedImageError):
        return None


def run_signature(settings: AppSettings, name) -> tuple:
    """Changes whenever anything the view shows changes (cheap: stat calls only)."""
    try:
        run_dir = runs.safe_run_dir(settings.runs_root, name)
    except DistcoreError:
        return (name,)
    sig = [name, jobs.is_active(run_dir)]
    for f in ("metrics.jsonl", "status.json", jobs.LOG_FILE, "checkpoints", "system.jsonl", follow.IMAGES):
        try:
            st = (run_dir / f).stat()
            sig += [st.st_size, st.st_mtime_ns]
        except OSError:
            sig += [None, None]
    return tuple(sig)


def poll_run(settings: AppSettings, name, last_sig):
    """Timer tick: redraw (run_panel) only when the run directory changed."""
    sig = run_signature(settings, name) if name else (None,)
    if list(sig) == list(last_sig or []):
        return (*[gr.skip()] * PANEL_OUTPUTS, last_sig)
    return (*run_panel(settings, name), list(sig))


def clear_stale_message(settings: AppSettings, name, message):
    """Timer tick: the answer to Start, Resume or Stop goes once the run it speaks of has ended."""
    try:
        record = follow.run_record(settings.runs_root, name) if name and message else None
    except DistcoreError:
        record = None
    return "" if follow.message_is_stale(message, name, record) else gr.skip()


PANEL_OUTPUTS = 9  # run_panel's: status, loss, epochs, log, system, generated images, Stop, Resume, Train more


def poll_lists(settings: AppSettings, last_labels, run, checkpoint, last, chosen=None, followed=None):
    """Timer tick for both run pickers: Train's, and Evaluate's with its checkpoints.
    The runs are listed once a tick for the two (each label reads a status.json).
    `followed` is the run the Train tab follows."""
    labels = follow.run_labels(settings.runs_root)
    return (
        *poll_run_list(labels, last_labels),
        *poll_evaluate_lists(settings, labels, run, checkpoint, last, chosen, followed),
    )


def poll_run_list(labels, last_labels):
    """The Train tab's run picker: new labels (name and state) only when they changed."""
    labels = [list(x) for x in labels]  # lists: what gr.State hands back
    if labels == (last_labels or []):
        return gr.skip(), last_labels
    return gr.update(choices=[tuple(x) for x in labels]), labels


def poll_evaluate_lists(settings: AppSettings, labels, run, checkpoint, last, chosen=None, followed=None):
    """The Evaluate tab's run labels (states) and checkpoints, redrawn only when they change.
    What they show is follow.evaluate_picks: the user's pick (`chosen`, set by the pickers'
    input events), else the run 2 · Train follows (`followed`), else a fresh page's run."""
    picked, ckpts, shown = follow.evaluate_picks(settings.runs_root, labels, run, checkpoint, chosen, followed)
    seen = [[list(x) for x in labels], picked, ckpts, shown]
    if seen == last:
        return gr.skip(), gr.skip(), last
    return gr.update(choices=labels, value=picked), gr.update(choices=ckpts, value=shown), seen


def on_load(settings: AppSettings, kept=None):
    """A page follows the run its browser followed (`kept`), if it is still there; a fresh
    one (or a second browser) the running job, if any (follow.default_run)."""
    labels = follow.run_labels(settings.runs_root)  # listed once, for both pickers
    run = follow.page_run(settings.runs_root, kept, labels)
    pickers = gr.update(choices=labels, value=run, info=unlisted_note(settings))
    return pickers, pickers, checkpoint_dropdown(settings, run)
