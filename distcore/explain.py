"""Explanations in people's words: how a global batch is cut, where a stop lands.

Markdown text (bold with **), no HTML; the app shows it, the tests read it. No TensorFlow.
"""

from __future__ import annotations

from . import runs
from .config import MAX_GLOBAL_BATCH, check_int
from .forms import MAX_WORKERS, replica_count
from .plots import count


def quotient(a: int, b: int) -> str:
    """'= 0.125' when three decimals say it exactly, else '≈ 3.333'."""
    text = f"{a / b:.3f}".rstrip("0").rstrip(".")
    return f"= {text}" if float(text) * b == a else f"≈ {text}"


def batch_note(gpus, global_batch, cpu_count, gpu_boxes, workers=1) -> str:
    """The per-replica batch of the form's global batch and devices, or a plain warning when
    it does not divide evenly; DistcoreError for a field that is not allowed."""
    replicas = replica_count(gpus, cpu_count, gpu_boxes, workers)
    g = check_int("global batch size", global_batch, high=MAX_GLOBAL_BATCH)
    # The reason follows the arithmetic: "(1 / 2 replicas = 0.5: one CPU replica per worker process)".
    why = ": one CPU replica per worker process" if check_int("worker processes", workers, high=MAX_WORKERS) > 1 else ""
    shown = count(replicas, "replica")
    if g % replicas:
        arithmetic = f"({g} / {shown} {quotient(g, replicas)}{why})"
        # Fewer examples than replicas leaves the same replicas empty at every step: say how many.
        empty = replicas - g
        what = (
            f"**{count(g, 'example')} for {shown}** {arithmetic}: at each step {empty} of them "
            f"{'gets' if empty == 1 else 'get'} an empty batch (still running the step and joining the "
            "all-reduce, adding nothing)"
            if g < replicas
            else f"**{g} does not divide evenly by {shown}** {arithmetic}: replicas will get unequal batches, "
            "and some may get an empty one at every step. How TensorFlow cuts a batch depends on the shard "
            "policy and drop_remainder: 4 over 3 replicas is 2/2/0, or 2/1/1 under FILE and OFF with "
            "drop_remainder"
        )
        # The refusal is named after both cuts, so it reads as the function API's, not as a third cut.
        return (
            f"⚠️ {what}. distribute_datasets_from_function refuses a global batch that does not divide evenly. "
            "Press **Show split** to see exactly."
        )
    return f"Per-replica batch: **{g // replicas}** ({g} / {shown}{why})"


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
