"""4 · Loss scaling: one global batch's loss, single device against distributed and common mistakes."""

from __future__ import annotations

import html

import gradio as gr

from distcore import forms, jobs, plots
from distcore.config import MAX_GLOBAL_BATCH, MAX_SEED, DistcoreError, check_int, is_empty

from .format import error_md, loss_row
from .settings import AppSettings
from .setup import LIVE

ROWS = (
    ("Single device (reference)", "single_device", None),
    (
        "Distributed step: compute_average_loss ÷ this batch's examples, SUM over replicas",
        "distributed",
        "error_distributed",
    ),
    (
        "The tutorial's constant: compute_average_loss(global_batch_size=G)",
        "tutorial_fixed_g",
        "error_tutorial_fixed_g",
    ),
    ("Keras 3's default reduction (sum_over_batch_size) in each replica", "keras_default", "error_keras_default"),
    ("Mistake: reduce_mean per replica, then SUM", "mistake_reduce_mean", "error_reduce_mean"),
    ("Mistake: a Keras Mean of the replicas' scaled losses", "mistake_keras_mean", "error_keras_mean"),
)


def loss_check(settings: AppSettings, cpu_count, gpu_boxes, global_batch, seed, workers=1, examples=None) -> str:
    """One global batch's loss: single device vs distributed vs the tutorial's constant divisor,
    Keras 3's default reduction and two classic mistakes; a partial batch with `examples` < G.
    With 2+ worker processes (one CPU replica each) it runs that many replicas in one process:
    the loss arithmetic is the same, and a cluster is not needed to show it."""
    try:
        workers = check_int("worker processes", workers, high=forms.MAX_WORKERS)
        names = (
            tuple(f"cpu:{i}" for i in range(workers))
            if workers > 1
            else forms.selected_devices(settings.gpus, cpu_count, gpu_boxes)
        )
        batch = check_int("global batch size", global_batch, high=MAX_GLOBAL_BATCH)
        # The seed is Setup's, in the same range; empty is 0.
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
        n = (
            0
            if is_empty(examples)
            else check_int("examples in the batch (0: the global batch size)", examples, low=0, high=batch)
        )
        if n:
            args += ["--examples", str(n)]
        r = jobs.run_cli_json(args, timeout=600)
    except DistcoreError as e:
        return error_md(e)
    table = "| method | loss | error vs single device |\n|---|---:|---:|\n" + "\n".join(
        loss_row(label, r[key], r.get(err) if err else None) for label, key, err in ROWS
    )
    if r.get("keras_default_failure"):  # under the table: in a cell it makes the table too wide for a phone
        table += (
            f"\n\n*Keras 3's default reduction failed: the strategy cannot add up the replicas' results "
            f"when one is empty ({html.escape(r['keras_default_failure'], quote=False)}).*"
        )
    shares = ", ".join(str(n) for n in r.get("per_replica_examples", []))
    where = (
        f", as {workers} replicas in one process: the same arithmetic as {workers} worker processes of "
        "one CPU replica each, which need no cluster to show it"
        if workers > 1
        else ""
    )
    partial = (
        f", a partial batch of {plots.count(r['examples'], 'example')}" if r["examples"] < r["global_batch"] else ""
    )
    return (
        f"**Global batch {r['global_batch']}{partial} on {plots.count(r['replicas'], 'replica')}** "
        f"(examples per replica: {shares}{where})\n\n{table}\n\n{r.get('explanation', '')}"
    )


def build(settings: AppSettings, setup: dict, bind) -> None:
    """The tab's layout and events; it reads the devices, batch and workers from Setup."""
    gr.Markdown(
        "With a strategy, each replica sees only its share of the global batch. The loss of one "
        "global batch must come out the same as on a single device: scale per-example losses by "
        "the **global** batch's example count, then SUM over replicas. This runs one global batch "
        "that way and in four others (the tutorial's constant divisor, Keras 3's default "
        "reduction, two classic mistakes), using the devices and global batch from "
        "**1 · Setup & split**. Give fewer examples than the global batch to see a partial last "
        "batch; its pieces show whether a replica is left empty (4 of a batch of 6 on 3 replicas: "
        "2 + 2 + 0)."
    )
    with gr.Row():
        seed = gr.Number(
            value=0,
            label="Seed (the initial weights; the batch is the first test images, as many as the next box says)",
        )
        examples = gr.Number(
            value=0,
            label="Examples in the batch (0: the global batch size)",
            info="fewer than the global batch size: a partial last batch",
        )
    button = gr.Button("Check loss scaling", variant="primary")
    result = gr.Markdown(elem_id="dc-loss", elem_classes=LIVE)
    button.click(
        bind(loss_check, settings),
        [setup["count"], setup["boxes"], setup["batch"], seed, setup["workers"], examples],
        result,
    )
