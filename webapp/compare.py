"""5 · Compare: the runs overlaid, the runs table, the settings that differ, a scaling sweep,
and renaming, deleting and noting runs. What is drawn and decided is distcore.compare's,
compareplots', sweep's and manage's; this module lays it out and wires it."""

from __future__ import annotations

import time

import gradio as gr

from distcore import compare, compareplots, follow, forms, manage, runs as rundirs, sweep
from distcore.config import DistcoreError, check_int

from . import compareapi as api
from .format import error_md
from .hosting import gradio_room
from .settings import AppSettings

CONFIRM_SECONDS = 10  # a second Delete this soon deletes
TABLE_HEADERS = list(compare.TABLE_COLUMNS)
SWEEP_HEADERS = ["run", "replicas", "workers", "global_batch", "examples_per_sec", "speedup", "efficiency", "state"]
PRIVATE = {"api_visibility": "private", "show_progress": "hidden"}  # timer ticks: not on the API page


# Column titles for people, short enough not to wrap mid-word; the fields keep their names in the JSON.
HEADER_LABELS = {
    "global_batch": "batch",
    "examples_per_sec": "examples/s",
    "test_accuracy": "accuracy",
    "wall_seconds": "time, s",
    "speedup": "speed-up",
}


def table_value(rows: list[dict], headers: list[str]) -> dict:
    return {
        "headers": [HEADER_LABELS.get(h, h) for h in headers],
        "data": [[row.get(h) for h in headers] for row in rows],
    }


def picks_or_default(settings: AppSettings, runs, touched) -> list[str]:
    """The picked runs; a page whose picker the user has not touched compares the newest runs,
    and goes on following them as new ones log steps (the picker shows the page's choice)."""
    return list(runs or []) if touched else compare.default_picks(settings.runs_root)


def compare_runs(settings: AppSettings, runs, x_axis="step", smoothing=0.6, log_scale=False, touched=False):
    """The picked runs overlaid: (picker, loss, per-epoch, examples/s and system figures, runs
    table, settings that differ, message)."""
    picks = picks_or_default(settings, runs, touched)
    names = follow.run_names(settings.runs_root)
    picks = [p for p in picks if p in names]  # a run renamed or deleted since is dropped
    message = ""
    try:
        result = compare.comparison(settings.runs_root, picks, x_axis, smoothing)
    except DistcoreError as e:
        result, message = compare.comparison(settings.runs_root, [], "step", 0), error_md(e)
    differ = result["differences"]
    return (
        # The value only where it is not what the page sent (a default, a run gone): a tick in flight
        # must not put back a run the user has just taken out.
        gr.update(choices=names, value=picks) if picks != list(runs or []) else gr.update(choices=names),
        compareplots.loss_figure(result, bool(log_scale)),
        compareplots.epoch_figure(result),
        compareplots.speed_figure(result),
        compareplots.system_figure(result),
        table_value(compare.table(settings.runs_root), TABLE_HEADERS),
        table_value([shown_difference(d, picks) for d in differ], ["field", *picks])
        if differ
        else table_value([], ["field"]),
        message,
    )


def shown_difference(row: dict, picks: list[str]) -> dict:
    """A row of Settings that differ as people read it: data by its name (an upload's file name,
    not the path the app keeps it under)."""
    if row.get("field") != "data":
        return row
    return {**row, **{name: forms.data_label(str(row[name])) for name in picks if row.get(name)}}


def signature(settings: AppSettings, picks) -> list:
    """Changes whenever the table or the picked runs' curves would (stat calls only)."""
    sig = []
    for name in follow.run_names(settings.runs_root):
        folder = settings.runs_root / name
        files = ("status.json", "notes.txt") + (("metrics.jsonl", "system.jsonl") if name in picks else ())
        for f in files:
            try:
                st = (folder / f).stat()
                sig.append([name, f, st.st_size, st.st_mtime_ns])
            except OSError:
                sig.append([name, f])
    return sig


def poll(settings: AppSettings, runs, x_axis, smoothing, log_scale, touched, last):
    """Timer tick: redraw when a run or the picks changed; the last signature is kept in `last`."""
    picks = picks_or_default(settings, runs, touched)
    seen = [picks, x_axis, smoothing, bool(log_scale), signature(settings, picks)]
    if seen == last:
        return (*[gr.skip()] * 8, last)
    return (*compare_runs(settings, runs, x_axis, smoothing, log_scale, touched), seen)


def export_csv(settings: AppSettings, runs, x_axis="step", smoothing=0.6):
    """The comparison as CSV: (file path or None, message)."""
    full = gradio_room(1 << 20)
    if full:
        return None, error_md(f"cannot hand the CSV over: {full}")
    try:
        result = compare.comparison(settings.runs_root, runs or [], x_axis, smoothing)
        path = rundirs.export_folder() / "comparison.csv"
        return gr.update(value=str(compare.write_csv(result, path)), visible=True), ""
    except DistcoreError as e:
        return None, error_md(e)


def start_sweep(settings: AppSettings, replicas="1,2", per_replica_batch=64, max_steps=40):
    """Start a scaling sweep in the background: (message, its name for the timer)."""
    try:
        plan = sweep.Sweep(
            replicas=sweep.int_list(replicas, "replicas", settings.max_logical_cpus),
            per_replica_batch=check_int("batch per replica", per_replica_batch),
            max_steps=check_int("max steps", max_steps),
        )
        name = sweep.start(settings.runs_root, plan, settings.max_jobs)
    except DistcoreError as e:
        return error_md(e), gr.skip()
    return f"Sweep **{name}** started: {len(plan.points())} runs, one after another.", name


def sweep_view(settings: AppSettings, name):
    """(scaling figure, entries table, what limits scaling) of sweep `name`, else the newest."""
    names = sweep.list_records(settings.runs_root)
    name = name if name in names else (names[0] if names else None)
    record = sweep.read_record(settings.runs_root, name) if name else None
    if not record:
        return compareplots.scaling_figure(None), table_value([], SWEEP_HEADERS), ""
    state = record.get("state", "?")
    note = f"**{name}** · {state}" + (f" · {record['error']}" if record.get("error") else "")
    limit = f"\n\n{record['limit']}" if record.get("limit") else ""
    return compareplots.scaling_figure(record), table_value(record.get("entries", []), SWEEP_HEADERS), note + limit


def poll_sweep(settings: AppSettings, name, last):
    names = sweep.list_records(settings.runs_root)
    shown = name if name in names else (names[0] if names else None)
    try:
        st = (sweep.record_path(settings.runs_root, shown)).stat() if shown else None
    except OSError:
        st = None
    seen = [shown, st.st_mtime_ns if st else None]
    if seen == last:
        return gr.skip(), gr.skip(), gr.skip(), last
    return (*sweep_view(settings, shown), seen)


def rename_run(settings: AppSettings, run, new_name):
    try:
        out = manage.rename_run(settings.runs_root, run, new_name)
    except DistcoreError as e:
        return error_md(e), gr.skip()
    return f"Renamed **{out['renamed']}** to **{out['to']}**.", gr.update(value=out["to"])


def delete_run(settings: AppSettings, run, armed=None):
    """Delete at the second click within CONFIRM_SECONDS; the first asks. Returns (message, armed)."""
    now = time.time()
    if not (armed and armed.get("run") == run and now - armed.get("time", 0) < CONFIRM_SECONDS):
        try:
            manage.refuse_if_running(manage.run_folder(settings.runs_root, run))  # refused before it asks
        except DistcoreError as e:
            return error_md(e), None
        return f"Delete **{run}** and all its files? Press **Delete** again within {CONFIRM_SECONDS} s.", {
            "run": run,
            "time": now,
        }
    try:
        out = manage.delete_run(settings.runs_root, run)
    except DistcoreError as e:
        return error_md(e), None
    return f"Deleted **{out['deleted']}**.", None


def run_notes(settings: AppSettings, run, notes):
    try:
        out = manage.write_notes(settings.runs_root, run, notes)
    except DistcoreError as e:
        return error_md(e)
    return f"Note of **{out['run']}** saved." if out["notes"] else f"Note of **{out['run']}** removed."


def pick_managed(settings: AppSettings, run):
    """The note of the run picked under Manage, into its box."""
    try:
        return manage.read_notes(manage.run_folder(settings.runs_root, run))
    except DistcoreError:
        return ""


def build(settings: AppSettings, bind, timer: gr.Timer, tab: gr.Tab) -> dict:
    """The tab's layout and events; figures first."""
    with gr.Row():
        picker = gr.Dropdown([], value=[], multiselect=True, label="Runs", scale=4, elem_id="compare-runs")
        x_axis = gr.Radio(list(compare.X_AXES), value="step", label="x-axis", scale=2)
        smoothing = gr.Slider(0, 0.99, value=0.6, step=0.01, label="Smoothing", scale=2, elem_id="compare-smoothing")
        log_scale = gr.Checkbox(False, label="Log scale", scale=1)
    loss_plot = gr.Plot(show_label=False, elem_id="compare-loss")
    message = gr.Markdown()
    with gr.Row():
        epoch_plot = gr.Plot(show_label=False)
        speed_plot = gr.Plot(show_label=False)
    system_plot = gr.Plot(show_label=False)
    table = gr.Dataframe(label="Runs", interactive=False)
    differ = gr.Dataframe(label="Settings that differ", interactive=False)
    with gr.Row():
        export = gr.Button("Export CSV", size="sm")
        csv_file = gr.File(label="CSV", interactive=False, visible=False)
    with gr.Accordion("Scaling sweep", open=False):
        with gr.Row():
            sweep_replicas = gr.Textbox("1,2", label="Replicas")
            sweep_batch = gr.Number(64, label="Batch per replica", precision=0)
            sweep_steps = gr.Number(40, label="Max steps", precision=0)
            sweep_button = gr.Button("Run sweep", variant="primary")
        sweep_message = gr.Markdown()
        scaling_plot = gr.Plot(show_label=False)
        sweep_table = gr.Dataframe(interactive=False, show_label=False)
        sweep_note = gr.Markdown()
    with gr.Accordion("Rename, delete, notes", open=False, elem_id="compare-manage"):
        with gr.Row():
            managed = gr.Dropdown([], label="Run", scale=2)
            new_name = gr.Textbox(label="New name", scale=2)
            rename = gr.Button("Rename", scale=1)
            delete = gr.Button("Delete", variant="stop", scale=1)
        with gr.Row():
            notes = gr.Textbox(label="Note", max_lines=3, scale=4)
            save_notes = gr.Button("Save note", scale=1)
        manage_message = gr.Markdown()

    touched, last, sweep_name, sweep_seen, armed = (gr.State(None) for _ in range(5))
    controls = [picker, x_axis, smoothing, log_scale]
    views = [picker, loss_plot, epoch_plot, speed_plot, system_plot, table, differ, message]
    picker.input(lambda: True, None, touched, **PRIVATE)
    for control in (picker, x_axis, log_scale):
        control.input(bind(compare_runs, settings), [*controls, touched], views, **PRIVATE)
    smoothing.release(bind(compare_runs, settings), [*controls, touched], views, **PRIVATE)
    timer.tick(bind(poll, settings), [*controls, touched, last], [*views, last], concurrency_limit=4, **PRIVATE)
    tab.select(bind(compare_runs, settings), [*controls, touched], views, **PRIVATE).then(
        None, None, None, js="() => { setTimeout(() => window.dispatchEvent(new Event('resize')), 100); }"
    )
    export.click(bind(export_csv, settings), [picker, x_axis, smoothing], [csv_file, message], **PRIVATE)
    sweep_button.click(
        bind(start_sweep, settings),
        [sweep_replicas, sweep_batch, sweep_steps],
        [sweep_message, sweep_name],
        **PRIVATE,
    )
    timer.tick(
        bind(poll_sweep, settings),
        [sweep_name, sweep_seen],
        [scaling_plot, sweep_table, sweep_note, sweep_seen],
        concurrency_limit=4,
        **PRIVATE,
    )
    # The runs under Manage follow the table's list.
    table.change(lambda: gr.update(choices=follow.run_names(settings.runs_root)), None, managed, **PRIVATE)
    managed.input(bind(pick_managed, settings), managed, notes, **PRIVATE)
    rename.click(bind(rename_run, settings), [managed, new_name], [manage_message, managed], **PRIVATE)
    delete.click(bind(delete_run, settings), [managed, armed], [manage_message, armed], **PRIVATE)
    save_notes.click(bind(run_notes, settings), [managed, notes], manage_message, **PRIVATE)
    api.add_endpoints(settings)
    return {"picker": picker, "loss": loss_plot, "table": table, "scaling": scaling_plot}
