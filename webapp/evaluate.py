"""3 · Evaluate: restore a checkpoint, without a strategy or on chosen devices, and evaluate it."""

from __future__ import annotations

import gradio as gr
import numpy as np

from distcore import data, follow, forms, plots, runs, verdicts
from distcore.config import DistcoreError

from . import watch
from .format import error_md, gallery_caption, plain_text
from .hosting import gradio_room
from .settings import AppSettings
from .setup import LIVE, device_inputs

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
        result = follow.evaluate_or_newest(run_dir, checkpoint, saved, args)
        gallery = sample_gallery(result.get("samples") or [], result.get("data_dir"))
    except DistcoreError as e:
        return error_md(e), None, [], None
    full = gradio_room(GALLERY_BYTES) if gallery else None
    if full:  # the result still shows
        gallery = []
        result["note"] = " ".join(filter(None, [result.get("note"), f"The test images are not shown: {full}"]))
    where = "no strategy" if mode == NO_STRATEGY else ", ".join(result.get("devices") or [])
    md = (
        f"### Accuracy {100 * result['accuracy']:.2f}% · loss {result['loss']:.4f}\n"
        f"{result.get('checkpoint', checkpoint)} (step {result.get('step', '?')}) of "
        f"**{run_dir.name}**, restored with {where}, on {result.get('examples', '?')} test images."
        + (f"\n\nNote: {result['note']}" if result.get("note") else "")
    )
    fig = plots.confusion_figure(result["confusion"], data.CLASS_NAMES) if result.get("confusion") else None
    result = {**result, "run": run_dir.name, "checkpoint": result.get("checkpoint", checkpoint), "strategy": mode}
    return md, fig, gallery, result


TABLE_HEADERS = ["run", "checkpoint", "strategy", "devices", "accuracy %", "loss", "Δ vs no strategy", "same"]


def evaluate_and_compare(settings: AppSettings, rows, run, checkpoint, restore_with, replicas, gpus, followed=None):
    """The Evaluate button and the API's /evaluate: evaluate (named parameters), add the result
    as a row of this session's comparison table (distcore.verdicts). Returns (markdown, table,
    confusion, gallery, the answer as plain values, rows)."""
    md, fig, gallery, result = evaluate(settings, run, checkpoint, restore_with, replicas, gpus, followed)
    if result is None:
        return md, gr.skip(), fig, gallery, {"ok": False, "message": plain_text(md)}, rows
    devices = (result.get("devices") or []) if restore_with == ON_DEVICES else []
    row = verdicts.evaluation_row(result, result["run"], restore_with, devices)
    rows = [*(rows or []), row][-MAX_ROWS:]
    compared = verdicts.compare_evaluations(rows)
    answer = {"ok": True, "message": plain_text(md), **compared[-1], "step": result.get("step")}
    return md, table_rows(compared), fig, gallery_mistakes_first(gallery), answer, rows


MAX_ROWS = 20  # evaluations a session's table keeps, the newest last


def table_rows(compared: list[dict]) -> list[list]:
    """The comparison table's cells: ✓ where an evaluation equals its no-strategy one."""
    return [
        [
            r["run"],
            r["checkpoint"],
            "none" if r["strategy"] == NO_STRATEGY else "MirroredStrategy",
            r["devices"] or "–",
            round(100 * r["accuracy"], 2),
            round(r["loss"], 4),
            "–" if r["difference"] is None else f"{r['difference']:+.2f} pp",
            "" if r["same"] is None else ("✓" if r["same"] else "✗"),
        ]
        for r in compared
    ]


def gallery_mistakes_first(items: list) -> list:
    """The wrong predictions (captions starting ✗) first, then the right ones."""
    return sorted(items, key=lambda item: not str(item[1]).startswith("✗"))


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
        [ui["result"], ui["table"], ui["confusion"], ui["gallery"], ui["answer"], rows],
        api_name="evaluate",
    )
    return ui
