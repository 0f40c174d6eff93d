"""Explanations in people's words: how a global batch is cut, where a stop lands.

Markdown text (bold with **), no HTML; the app shows it, the tests read it. No TensorFlow.
"""

from __future__ import annotations

from . import plots, runs
from .config import MAX_GLOBAL_BATCH, check_int
from .forms import MAX_WORKERS, replica_count
from .plots import count


def quotient(a: int, b: int) -> str:
    """'= 0.125' when three decimals say it exactly, else '≈ 3.333'."""
    text = f"{a / b:.3f}".rstrip("0").rstrip(".")
    return f"= {text}" if float(text) * b == a else f"≈ {text}"


def batch_note(gpus, global_batch, cpu_count, gpu_boxes, workers=1) -> str:
    """The per-replica batch of the form's global batch and devices, or a plain warning when
    it does not divide evenly (batch_note_parts, in one text); DistcoreError for a field that is
    not allowed."""
    headline, details = batch_note_parts(gpus, global_batch, cpu_count, gpu_boxes, workers)
    return f"{headline} {details}".strip()


def batch_note_parts(gpus, global_batch, cpu_count, gpu_boxes, workers=1) -> tuple[str, str]:
    """(headline, details) of batch_note: the arithmetic in one sentence, and why it matters
    (how TensorFlow cuts the batch, what the function API refuses) for a fold; details is empty
    when the batch divides evenly."""
    replicas = replica_count(gpus, cpu_count, gpu_boxes, workers)
    g = check_int("global batch size", global_batch, high=MAX_GLOBAL_BATCH)
    # The reason follows the arithmetic: "(1 / 2 replicas = 0.5: one CPU replica per worker process)".
    why = ": one CPU replica per worker process" if check_int("worker processes", workers, high=MAX_WORKERS) > 1 else ""
    shown = count(replicas, "replica")
    if not g % replicas:
        return f"Per-replica batch: **{g // replicas}** ({g} / {shown}{why})", ""
    arithmetic = f"({g} / {shown} {quotient(g, replicas)}{why})"
    # The refusal is named after both cuts, so it reads as the function API's, not as a third cut.
    refusal = "distribute_datasets_from_function refuses a global batch that does not divide evenly."
    if g < replicas:  # the same replicas are empty at every step: say how many
        empty = replicas - g
        return (
            f"⚠️ **{count(g, 'example')} for {shown}** {arithmetic}: at each step {empty} of them "
            f"{'gets' if empty == 1 else 'get'} an empty batch.",
            f"An empty replica still runs the step and joins the all-reduce, adding nothing. {refusal}",
        )
    return (
        f"⚠️ **{g} does not divide evenly by {shown}** {arithmetic}: replicas get unequal batches, and "
        "some may get an empty one at every step.",
        "How TensorFlow cuts a batch depends on the shard policy and drop_remainder: 4 over 3 replicas is "
        f"2/2/0, or 2/1/1 under FILE and OFF with drop_remainder. {refusal}",
    )


def stop_point(config: dict) -> str:
    """Where a running run stops: the loop checks for a stop between chunks of Steps per loop
    steps, and a cluster's workers vote on it once per chunk. A process's first loop is one
    step (its first record comes as soon as the step is traced), so a stop then lands at step 1."""
    loop = count(int(config.get("steps_per_loop") or 1), "step")
    when = (
        "once its workers agree, at the end of this loop or at most one loop later"
        if int(config.get("workers") or 1) > 1
        else "at the end of the current loop"
    )
    return (
        f"it stops {when} (steps per loop: {loop}; a process's first loop is its first step), "
        "saves a checkpoint and exits."
    )


def before_training_stop(name: str, checkpoints: list[str]) -> str:
    """What a stop before the first step does: a new run exits with nothing to save; a resumed
    run stops where it resumed from and keeps its checkpoint."""
    if not checkpoints:
        return f"Stopping **{name}**: training has not begun, so it exits at step 0 with nothing to save."
    newest = checkpoints[-1]
    return (
        f"Stopping **{name}**: it has not resumed training yet, so it exits at step "
        f"{runs.checkpoint_step(newest)}, where it resumed from; its checkpoint {newest} stays."
    )


def split_notes(plan: dict) -> tuple[str, str]:
    """(headline, details) of a split plan: one sentence of about 20 words (the numbers, then the
    first thing worth seeing: a partial step or an empty replica), and the rest for a fold."""
    full = plots.split_summary(plan, key=False).split("\n")  # the figure draws the colour key
    headline = full[0]
    facts = plots.split_facts(plan)
    if facts:
        headline += " " + facts[0]
    elif not plots.holds_more(plan.get("steps") or [], int(plan.get("global_batch") or 0)):
        headline += " Every batch is full; every replica gets a piece."
    return headline, "\n".join(full[1:]).strip()
