"""3 · Evaluate: restore a checkpoint, without a strategy or on chosen devices, and evaluate it."""

from __future__ import annotations

import gradio as gr
import numpy as np

from distcore import data, follow, forms, plots, runs
from distcore.config import DistcoreError

from . import watch
from .format import error_md, gallery_caption
from .hosting import gradio_room
from .settings import AppSettings
from .setup import LIVE, device_inputs

NO_STRATEGY, ON_DEVICES = "none", "devices"
GALLERY_BYTES = 16 * 8192  # 16 images of 112x112 grey pixels, as PNG files (1-5 KB each)


def evaluate(settings: AppSettings, name, checkpoint, mode, cpu_count, gpu_boxes, followed=None):
    """Restore a checkpoint and evaluate it: (markdown, confusion figure, gallery items).
    With no run chosen it evaluates the run 2 · Train follows (`followed`), as the picker shows
    it once filled in; with no checkpoint chosen, the newest, as the picker shows it."""
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
        return error_md(e), None, []
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
    return md, fig, gallery


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
    gr.Markdown(
        "Restore a saved checkpoint, without a strategy or on a device set of your "
        "choice, and evaluate it on the run's test set."
    )
    with gr.Row(equal_height=True):
        ui["run"] = gr.Dropdown(choices=[], value=None, label="Run", scale=3, allow_custom_value=True)
        # allow_custom_value (both): a timer tick can carry the previous run's checkpoint while the
        # choices already list the new run's, which Gradio would refuse with an error popup.
        # evaluate() checks the name itself.
        ui["checkpoint"] = gr.Dropdown(choices=[], value=None, label="Checkpoint", scale=2, allow_custom_value=True)
        refresh = gr.Button("↻ Refresh", scale=1)
    ui["mode"] = gr.Radio(
        [("No strategy (plain model)", NO_STRATEGY), ("MirroredStrategy on these devices:", ON_DEVICES)],
        value=NO_STRATEGY,
        label="Restore with",
    )
    # Greyed out while "No strategy" is chosen: they are not used then.
    ui["count"], ui["boxes"] = device_inputs(settings, " to evaluate on", "dc-eval-devices", interactive=False)
    ui["mode"].change(
        lambda mode: [gr.update(interactive=mode == ON_DEVICES)] * 2,
        ui["mode"],
        [ui["count"], ui["boxes"]],
        show_progress="hidden",
        queue=False,
    )
    go_button = gr.Button("Evaluate checkpoint", variant="primary")
    ui["result"] = gr.Markdown(elem_classes=LIVE)
    ui["confusion"] = gr.Plot(label="Confusion matrix")
    # Full width, 4 across (16 images: 4 full rows): a caption as long as "✗ T-shirt/top → Ankle
    # boot" fits under its image. "fit-content", since Gradio gives height="auto" a 550 px box that
    # scrolls on its own. Its caption above it, not as Gradio's label, which on a phone covers
    # the first images' tops.
    gr.Markdown("**Test images**: ✓ right · ✗ true class → predicted")
    ui["gallery"] = gr.Gallery(
        show_label=False, columns=4, height="fit-content", object_fit="contain", elem_id="dc-gallery"
    )
    ui["run"].change(bind(watch.checkpoint_dropdown, settings), ui["run"], ui["checkpoint"])
    refresh.click(lambda name: watch.run_dropdown(settings, name), ui["run"], ui["run"]).then(
        bind(watch.checkpoint_dropdown, settings), ui["run"], ui["checkpoint"]
    )
    go_button.click(
        bind(evaluate, settings),
        [ui["run"], ui["checkpoint"], ui["mode"], ui["count"], ui["boxes"], followed],
        [ui["result"], ui["confusion"], ui["gallery"]],
    )
    return ui
