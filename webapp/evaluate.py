"""3 · Evaluate: restore a checkpoint, without a strategy or on chosen devices, and evaluate it."""

from __future__ import annotations

import tempfile

import gradio as gr
import numpy as np

from distcore import data, datasets, follow, forms, plots, runs, verdicts
from distcore.config import DistcoreError

from . import watch
from .format import error_md, gallery_caption, plain_text
from .hosting import gradio_room
from .settings import AppSettings
from .setup import LIVE, device_inputs
from .watch import read_image

NO_STRATEGY, ON_DEVICES = "none", "devices"
GALLERY_BYTES = 16 * 8192  # 16 images of 112x112 grey pixels, as PNG files (1-5 KB each)


def evaluate(settings: AppSettings, name, checkpoint, mode, cpu_count, gpu_boxes, followed=None):
    """Restore a checkpoint and evaluate it: (markdown, confusion figure, gallery items, result or
    None). With no run chosen it evaluates the run 2 · Train follows (`followed`), as the picker
    shows it once filled in; with no checkpoint chosen, the newest, as the picker shows it."""
    try:
        run_dir = watch.run_dir_of(settings, name or followed)
        saved = runs.list_checkpoints(run_dir)
        if not saved:
            raise DistcoreError(runs.no_checkpoint(run_dir))
        checkpoint = checkpoint or saved[-1]
        args = ["evaluate", "--run-dir", str(run_dir), "--details"]
        if mode == NO_STRATEGY:
            args.append("--no-strategy")
        else:
            args += ["--devices", ",".join(forms.selected_devices(settings.gpus, cpu_count, gpu_boxes))]
        result = follow.run_or_newest(run_dir, checkpoint, saved, args)
        data_name = runs.shown_config(run_dir)[0].get("data") or "fashion-mnist"
        names = forms.class_names(data_name, len(result.get("confusion") or []))
        gallery = sample_gallery(result.get("samples") or [], result.get("data_dir"), data_name, names, run_dir)
    except DistcoreError as e:
        return error_md(e), None, [], None
    full = gradio_room(GALLERY_BYTES) if gallery else None
    if full:  # the result still shows
        gallery = []
        result["note"] = " ".join(filter(None, [result.get("note"), f"The test images are not shown: {full}"]))
    where = "no strategy" if mode == NO_STRATEGY else ", ".join(result.get("devices") or [])
    md = (
        f"### {measured_text(result)}\n"
        f"{result.get('checkpoint', checkpoint)} (step {result.get('step', '?')}) of "
        f"**{run_dir.name}**, restored with {where}, on {result.get('examples', '?')} test images."
        + (f"\n\nNote: {result['note']}" if result.get("note") else "")
    )
    fig = plots.confusion_figure(result["confusion"], names) if result.get("confusion") else None
    result = {**result, "run": run_dir.name, "checkpoint": result.get("checkpoint", checkpoint), "strategy": mode}
    return md, fig, gallery, result


def measured_text(result: dict) -> str:
    """The headline of an evaluation: 'Accuracy 88.04% · loss 0.3300' (a classifier's), else each
    test metric, 'd_loss 0.6931 · g_loss 0.7012' (the GAN's)."""
    measured = verdicts.measures(result)
    if "accuracy" in measured:
        return f"Accuracy {100 * measured['accuracy']:.2f}% · loss {measured.get('loss', float('nan')):.4f}"
    return " · ".join(f"{k} {v:.4f}" for k, v in measured.items()) or "No test metric"


TABLE_HEADERS = ["run", "checkpoint", "strategy", "devices", "accuracy %", "loss", "Δ vs no strategy", "same"]


def evaluate_and_compare(settings: AppSettings, rows, run, checkpoint, restore_with, replicas, gpus, followed=None):
    """The Evaluate button and the API's /evaluate: evaluate (named parameters), add the result
    as a row of this session's comparison table (distcore.verdicts). Returns (markdown, table,
    confusion, gallery, generated images, the answer as plain values, rows): a classifier shows its
    confusion matrix and test images, a GAN its generator's grid."""
    md, fig, gallery, result = evaluate(settings, run, checkpoint, restore_with, replicas, gpus, followed)
    if result is None:
        no_grid = gr.update(value=None, visible=False)
        return md, gr.skip(), fig, gallery, no_grid, {"ok": False, "message": plain_text(md)}, rows
    devices = (result.get("devices") or []) if restore_with == ON_DEVICES else []
    row = verdicts.evaluation_row(result, result["run"], restore_with, devices)
    rows = [*(rows or []), row][-MAX_ROWS:]
    compared = verdicts.compare_evaluations(rows)
    answer = {"ok": True, "message": plain_text(md), **compared[-1], "step": result.get("step")}
    # As the task has it: the classifier's confusion matrix and test images, or the generated images.
    grid = read_image(result["grid"]) if result.get("grid") else None
    return (
        md,
        table_value(compared),
        gr.update(value=fig, visible=grid is None),
        gr.update(value=gallery_mistakes_first(gallery), visible=grid is None),
        gr.update(value=grid, visible=grid is not None),
        answer,
        rows,
    )


MAX_ROWS = 20  # evaluations a session's table keeps, the newest last


def table_rows(compared: list[dict]) -> list[list]:
    """The comparison table's cells: ✓ where an evaluation equals its no-strategy one. A
    classifier's row has its accuracy % and loss; another task's its first two test metrics
    (the GAN's d_loss and g_loss), which table_headers names."""
    return [
        [
            r["run"],
            r["checkpoint"],
            "none" if r["strategy"] == NO_STRATEGY else "MirroredStrategy",
            r["devices"] or "–",
            *measure_cells(r),
            difference_cell(r),
            "" if r["same"] is None else ("✓" if r["same"] else "✗"),
        ]
        for r in compared
    ]


def measure_cells(row: dict) -> list:
    if "accuracy" in row:
        return [round(100 * row["accuracy"], 2), round(row["loss"], 4) if "loss" in row else "–"]
    values = [round(v, 4) for v in row["measures"].values()][:2]
    return values + ["–"] * (2 - len(values))


def difference_cell(row: dict) -> str:
    if row["difference"] is None:
        return "–"
    return f"{row['difference']:+.2f} pp" if "accuracy" in row else f"{row['difference']:+.4f}"


def table_headers(compared: list[dict]) -> list[str]:
    """TABLE_HEADERS with the two measure columns named by the rows: 'accuracy %' and 'loss' for
    classifiers, a GAN's 'd_loss' and 'g_loss', both names ('accuracy % / d_loss') in a mixed table."""
    classifier = not compared or any("accuracy" in r for r in compared)
    others = [list(r["measures"]) for r in compared if "accuracy" not in r]
    columns = []
    for i in (0, 1):
        names = ([TABLE_HEADERS[4 + i]] if classifier else []) + [n[i] for n in others if len(n) > i]
        columns.append(" / ".join(dict.fromkeys(names)) or "–")
    return [*TABLE_HEADERS[:4], *columns, *TABLE_HEADERS[6:]]


def table_value(compared: list[dict]) -> dict:
    return {"headers": table_headers(compared), "data": table_rows(compared)}


def gallery_mistakes_first(items: list) -> list:
    """The wrong predictions (captions starting ✗) first, then the right ones."""
    return sorted(items, key=lambda item: not str(item[1]).startswith("✗"))


def sample_gallery(samples: list[dict], data_dir=None, data_name="fashion-mnist", names=data.CLASS_NAMES, run_dir=None):
    """(image, caption) pairs for the sample predictions, of the run's own test images when they
    are grey images of bytes (the built-ins', or an upload of such); none for other examples."""
    if not samples:
        return []
    images = run_test_images(data_name, data_dir, run_dir)
    if images is None:
        return []
    scale = max(1, 112 // images.shape[2])  # 28x28 -> 112x112: the browser shows sharp pixels, not a blur
    return [
        (
            np.kron(images[s["index"]], np.ones((scale, scale), dtype=np.uint8)),
            gallery_caption(s["predicted"], s["label"], names),
        )
        for s in samples
        if s["index"] < len(images)
    ]


def run_test_images(data_name: str, data_dir=None, run_dir=None):
    """The run's test images as (N, h, w) uint8, or None when its examples are not such images."""
    if data_name == "fashion-mnist":
        return data.load(data_dir, download=False).test_images
    try:
        found = datasets.load(data_name, run_dir=run_dir).test_images
    except DistcoreError:
        return None
    if found.dtype != np.uint8 or not (found.ndim == 3 or (found.ndim == 4 and found.shape[-1] == 1)):
        return None
    return found.reshape(found.shape[:3])


def export_model(settings: AppSettings, run, checkpoint, followed=None):
    """The Export button and the API's /export_model: the checkpoint's model (the classifier's;
    the GAN's generator) as a Keras file, by `distcore export` in its own process. Returns (the
    file or None, message). With no run or checkpoint chosen: the run 2 · Train follows, its newest."""
    try:
        run_dir = watch.run_dir_of(settings, run or followed)
        saved = runs.list_checkpoints(run_dir)
        if not saved:
            raise DistcoreError(runs.no_checkpoint(run_dir))
        checkpoint = checkpoint or saved[-1]
        folder = runs.export_folder()
        args = ["export", "--run-dir", str(run_dir), "--out", str(folder / "model.keras"), "--json"]
        result = follow.run_or_newest(run_dir, checkpoint, saved, args, timeout=600)  # as Evaluate reads it
        out = (folder / "model.keras").rename(folder / f"{run_dir.name}-{result['checkpoint']}.keras")
        full = gradio_room(out.stat().st_size)
    except OSError as e:  # a full temporary folder, said in place of Gradio's bare "Error"
        return None, error_md(f"cannot write the model in {tempfile.gettempdir()}: {e.strerror or e}.")
    except DistcoreError as e:
        return None, error_md(e)
    if full:
        return None, error_md(f"cannot hand the model to the browser: {full}")
    what = "its generator" if result.get("task") == "gan" else "its model"
    note = f" {result['note']}" if result.get("note") else ""
    return str(out), (
        f"**{run_dir.name}** {result['checkpoint']}: {what} as a Keras file (`keras.models.load_model`).{note}"
    )


def build(settings: AppSettings, bind, followed) -> dict:
    """The tab's layout and events; `followed` is 2 · Train's run picker. Returns its components."""
    ui = {}
    with gr.Row(equal_height=True):
        ui["run"] = gr.Dropdown(choices=[], value=None, label="Run", scale=3, allow_custom_value=True)
        # allow_custom_value (both): a timer tick can carry the previous run's checkpoint while the
        # choices already list the new run's, which Gradio would refuse with an error popup.
        # evaluate() checks the name itself.
        ui["checkpoint"] = gr.Dropdown(choices=[], value=None, label="Checkpoint", scale=2, allow_custom_value=True)
        refresh = gr.Button("↻ Refresh", scale=0)
    with gr.Row(equal_height=True):
        ui["mode"] = gr.Radio(
            [("No strategy", NO_STRATEGY), ("MirroredStrategy on:", ON_DEVICES)],
            value=NO_STRATEGY,
            label="Restore with",
            scale=2,
        )
        # Greyed out while "No strategy" is chosen: they are not used then.
        ui["count"], ui["boxes"] = device_inputs(settings, "", "dc-eval-devices", interactive=False)
        go_button = gr.Button("Evaluate checkpoint", variant="primary", scale=1)
    ui["result"] = gr.Markdown(elem_classes=LIVE)
    ui["table"] = gr.Dataframe(
        headers=TABLE_HEADERS, value=None, interactive=False, label="Evaluations", elem_id="dc-evaluations"
    )
    ui["answer"] = gr.JSON(visible=False, label="Answer")
    with gr.Row():
        ui["confusion"] = gr.Plot(label="Confusion matrix", scale=1)
        # A GAN's evaluation draws its generator's grid instead of a confusion matrix and test images.
        ui["grid"] = gr.Image(
            label="Generated images (the run's fixed latent vectors)",
            format="png",
            interactive=False,
            visible=False,
            height=500,
            elem_id="dc-eval-grid",
            buttons=["download"],
        )
        # Mistakes first; 8 across, small: a caption as long as "✗ T-shirt/top → Ankle boot" still
        # fits. "fit-content", since Gradio gives height="auto" a 550 px box that scrolls on its own.
        ui["gallery"] = gr.Gallery(
            label="Test images: ✗ true → predicted first",
            columns=4,
            height="fit-content",
            object_fit="contain",
            elem_id="dc-gallery",
            scale=1,
        )
    with gr.Row():
        export = gr.Button("Export model (.keras)", size="sm", scale=0, min_width=200)
        # Shown once it holds a file (static/app.css): empty, it is a large blank box.
        ui["model_file"] = gr.File(label="Model", interactive=False, scale=1, elem_id="dc-model-file")
        ui["export_msg"] = gr.Markdown(elem_classes=LIVE)
    rows = gr.State([])  # per session: its evaluations, the comparison table's rows
    ui["mode"].change(
        lambda mode: [gr.update(interactive=mode == ON_DEVICES)] * 2,
        ui["mode"],
        [ui["count"], ui["boxes"]],
        show_progress="hidden",
        queue=False,
        api_visibility="private",
    )
    ui["run"].change(bind(watch.checkpoint_dropdown, settings), ui["run"], ui["checkpoint"], api_visibility="private")
    refresh.click(lambda name: watch.run_dropdown(settings, name), ui["run"], ui["run"], api_visibility="private").then(
        bind(watch.checkpoint_dropdown, settings), ui["run"], ui["checkpoint"], api_visibility="private"
    )
    go_button.click(
        bind(evaluate_and_compare, settings),
        [rows, ui["run"], ui["checkpoint"], ui["mode"], ui["count"], ui["boxes"], followed],
        [ui["result"], ui["table"], ui["confusion"], ui["gallery"], ui["grid"], ui["answer"], rows],
        api_name="evaluate",
    )
    export.click(
        bind(export_model, settings),
        [ui["run"], ui["checkpoint"], followed],
        [ui["model_file"], ui["export_msg"]],
        api_name="export_model",
        api_description="A checkpoint's model (a GAN's generator) as a .keras file; empty checkpoint: the newest.",
    )
    # Another run or checkpoint picked: the exported file is no longer its.
    gr.on(
        [ui["run"].change, ui["checkpoint"].change],
        lambda: (None, ""),
        None,
        [ui["model_file"], ui["export_msg"]],
        show_progress="hidden",
        api_visibility="private",
    )
    return ui
