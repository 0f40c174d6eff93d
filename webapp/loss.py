"""4 · Loss scaling: one global batch's loss, single device against distributed and common mistakes."""

from __future__ import annotations

import html

import gradio as gr

from distcore import forms, jobs, verdicts
from distcore.config import MAX_GLOBAL_BATCH, MAX_SEED, DistcoreError, check_int, is_empty

from .format import error_md
from .settings import AppSettings
from .setup import LIVE

PARTIAL = (3, 6, 4)  # the partial-last-batch preset: replicas, global batch, examples (2 + 2 + 0)


def loss_check(settings: AppSettings, cpu_count, gpu_boxes, global_batch, seed, workers=1, examples=None):
    """One global batch's loss: single device vs distributed vs the tutorial's constant divisor,
    Keras 3's default reduction and two classic mistakes, each with its verdict
    (distcore.verdicts); a partial batch with `examples` < G. Returns (markdown, the result and
    verdicts as plain values). With 2+ worker processes (one CPU replica each) it runs that many
    replicas in one process: the loss arithmetic is the same, and a cluster is not needed to show it."""
    try:
        workers = check_int("worker processes", workers, high=forms.MAX_WORKERS)
        names = (
            tuple(f"cpu:{i}" for i in range(workers))
            if workers > 1
            else forms.selected_devices(settings.gpus, cpu_count, gpu_boxes)
        )
        batch = check_int("global batch size", global_batch, high=MAX_GLOBAL_BATCH)
        args = [
            "loss-check",
            "--devices",
            ",".join(names),
            "--global-batch",
            str(batch),
            "--seed",
            str(check_int("seed", 0 if seed is None else seed, low=0, high=MAX_SEED)),
        ]
        # 0 or empty is a full batch: Gradio 6.31 shows an empty Number as 0 and sends 0.
        try:
            n = 0 if is_empty(examples) else check_int("examples in the batch", examples, low=0, high=batch)
        except DistcoreError:
            raise DistcoreError(
                f"examples in the batch ({examples!r}) must be a whole number from 1 to {batch}, or 0 for the "
                "whole global batch."
            ) from None
        if n:
            args += ["--examples", str(n)]
        r = jobs.run_cli_json(args, timeout=600)
    except DistcoreError as e:
        return error_md(e), {"ok": False, "message": str(e)}
    rows = verdicts.loss_verdicts(r)
    table = "| | method | loss | against one device |\n|---|---|---:|---|\n" + "\n".join(
        f"| {'✓' if v['ok'] else '✗'} | {v['method']} | {shown_loss(v['loss'])} | {v['verdict']} |" for v in rows
    )
    where = f" ({workers} replicas in one process: the arithmetic of {workers} worker processes)" if workers > 1 else ""
    details = r.get("explanation", "")
    if r.get("keras_default_failure"):
        details += f"\n\nTensorFlow's error: `{html.escape(r['keras_default_failure'], quote=False)}`"
    md = (
        f"**{verdicts.loss_headline(r)}**{where}\n\n{table}\n\n"
        f"<details><summary>Why</summary>\n\n{details}\n\n</details>"
    )
    answer = {"ok": True, **{k: r[k] for k in ("global_batch", "examples", "replicas", "per_replica_examples")}}
    return md, {**answer, "single_device": r["single_device"], "methods": rows}


def shown_loss(value) -> str:
    return "–" if value is None else f"{value:.6f}"


def check(settings: AppSettings, replicas, gpus, global_batch, examples, seed):
    """The tab's button and the API's /loss_check (named parameters)."""
    return loss_check(settings, replicas, gpus, global_batch, seed, 1, examples)


def build(settings: AppSettings, bind) -> None:
    """The tab's own controls, a partial-last-batch preset, and the verdict."""
    from .setup import device_inputs

    gr.Markdown("Does each way of scaling the loss give the single-device loss? ✓ right, ✗ wrong.")
    with gr.Row(equal_height=True):
        count, boxes = device_inputs(settings, "", "dc-loss-devices")
        batch = gr.Number(value=64, label="Global batch size", min_width=120)
        examples = gr.Number(value=0, label="Examples in the batch (0: the global batch size)", min_width=120)
        seed = gr.Number(value=0, label="Seed", min_width=80)
    with gr.Row():
        preset = gr.Button("Partial last batch: 4 examples, batch 6, 3 replicas", size="sm", scale=0)
        button = gr.Button("Check loss scaling", variant="primary", scale=0)
    result = gr.Markdown(elem_id="dc-loss", elem_classes=LIVE)
    answer = gr.JSON(visible=False, label="Answer")
    inputs = [count, boxes, batch, examples, seed]
    button.click(bind(check, settings), inputs, [result, answer], api_name="loss_check")
    preset.click(
        lambda: (PARTIAL[0], PARTIAL[1], PARTIAL[2]), None, [count, batch, examples], api_visibility="private"
    ).then(bind(check, settings), inputs, [result, answer], api_visibility="private")
