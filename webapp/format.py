"""Markdown and HTML for people: errors, times, progress, a run's status and setup lines."""

from __future__ import annotations

import html
import time
from pathlib import Path

from distcore import data, forms, jobs


def error_md(err) -> str:
    """A message for people, in red. Escaped, as it may quote what was typed (a run name of
    `<img src=x onerror=...>` is shown as text, never rendered)."""
    return f"<div class='dc-error' role='alert'>⚠️ <b>{html.escape(str(err), quote=False)}</b></div>"


def is_error(md) -> bool:
    return isinstance(md, str) and "dc-error" in md


def plain_text(md) -> str:
    """A message as plain text for the API: an error's words without its HTML, markdown's ** gone."""
    if not isinstance(md, str):
        return ""
    if is_error(md):
        inner = md.split("<b>", 1)[-1].rsplit("</b>", 1)[0]
        return html.unescape(inner)
    return md.replace("**", "")


def eta_text(seconds) -> str:
    if seconds is None:
        return "–"
    seconds = int(max(0, seconds))
    return f"{seconds // 60}m {seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def progress_bar(step: int, total: int) -> str:
    """An HTML progress element, which a screen reader reads as one bar (Gradio's Markdown
    drops aria-hidden, so a bar drawn in characters is read out character by character), the
    width of the panel with its percentage beside it (static/app.css: .dc-progress)."""
    if not total:
        return ""
    done = min(step, total)
    return (
        f"<div class='dc-progress'><progress value='{done}' max='{total}'></progress> {100 * done / total:.0f}%</div>"
    )


def status_md(p: jobs.Progress) -> str:
    what = "last loop" if p.live_speed else "mean"
    speed = f"{p.examples_per_sec:,.0f} examples/s ({what})" if p.examples_per_sec else "– examples/s"
    total = f" / {p.total_steps}" if p.total_steps else ""
    lines = [
        f"**{p.name}** · **{p.state}** · step {p.step}{total} · epoch {p.epoch} · "
        f"{speed} · ETA {eta_text(p.eta_seconds)}"
    ]
    if p.total_steps:
        lines.append(progress_bar(p.step, p.total_steps))
    if p.message:
        lines.append(p.message)
    if p.state == "died":
        # Resume is offered only to a run that saved its settings: without config.json it refuses.
        lines.append(
            "Its training process is gone without writing a final state (killed, or a crash). "
            + (
                "**Resume** continues from the newest checkpoint"
                + (f" ({p.checkpoints[-1]})." if p.checkpoints else "; it has none, so from step 0.")
                if p.has_config
                else "It died before it saved its settings (config.json), so there is nothing to resume: start it "
                "again under the same name."
            )
        )
    if p.checkpoints:
        shown_ones = ", ".join(p.checkpoints[-5:])
        lines.append(
            f"Checkpoints: {shown_ones}"
            if len(p.checkpoints) <= 5
            else f"Checkpoints ({len(p.checkpoints)}, the newest 5 here; all in 3 · Evaluate): {shown_ones}"
        )
    return "\n\n".join(lines)


def config_line(c: dict, engine: str = "local") -> str:
    """The run's setup in one line (empty until config.json exists): what trains (the classifier's
    model, optimizer and rate; the GAN; a task of your own), where (`engine` "ray" when the app
    launched its workers on Ray), and on which data."""
    if not c:
        return ""
    task = c.get("task") or "classifier"
    trained = f"{c.get('optimizer')} · learning rate {c.get('learning_rate')}"
    what = {"classifier": f"{c.get('model')} · {trained}", "gan": "GAN (the guide's two models and optimizers)"}
    data = c.get("data") or "fashion-mnist"
    of = "" if (task, data) == ("classifier", "fashion-mnist") else f" of {forms.data_label(data)}"
    where = forms.where_trained(c.get("devices") or [], int(c.get("workers") or 1), engine, each=True)
    return (
        f"\n\nSetup: {what.get(task, f'task {task} · {trained}')} · global batch {c.get('global_batch')} on "
        f"{where} · policy {str(c.get('policy')).upper()} · "
        f"input API {c.get('api')} · {c.get('train_examples')} training / "
        f"{c.get('test_examples')} test examples{of} · seed {c.get('seed')}"
        + (f" · L2 weight {c.get('l2')} (in the loss)" if c.get("l2") else "")
    )


def event_line(m: dict) -> str:
    stamp = time.strftime("%H:%M:%S", time.localtime(m.get("time", 0)))
    text = m.get("message") or m.get("checkpoint") or ""
    return f"[{stamp}] {m['event']} at step {m.get('step', '?')}: {text}".rstrip(": ")


def log_text(run_dir: Path, metrics: list[dict], n: int = 12) -> str:
    """The run's events (timestamped, from metrics.jsonl), then the process's own output
    (train.log: the command, then what it printed), each in its own order. A run the CLI or a
    library trained has no train.log, and one a later process trained has output elsewhere:
    the box says so rather than suggest more output is to come."""
    events = [event_line(m) for m in metrics if "event" in m][-n:]
    output = jobs.tail_lines(run_dir / jobs.LOG_FILE, n)
    missing = (
        "(none yet)"
        if (run_dir / jobs.LOG_FILE).exists()
        else "(none: the app keeps the output of the processes it starts; this run's came from the CLI or a "
        "Python program, which printed it where it ran)"
    )
    later = (
        ["(a later process, from the CLI or a Python program, trained this run since; its output is where it ran)"]
        if output and jobs.trained_since_by_others(run_dir, metrics)
        else []
    )
    return "\n".join(
        [
            "── events ──",
            *(events or ["(none yet)"]),
            "── process output (train.log) ──",
            *(output or [missing]),
            *later,
        ]
    )


def gallery_caption(predicted: int, label: int, names=data.CLASS_NAMES) -> str:
    """Short enough for a thumbnail: the true class first, so a cut-off caption still shows it."""

    def name(k: int) -> str:
        return str(names[k]) if 0 <= k < len(names) else str(k)

    if predicted == label:
        return f"✓ {name(label)}"
    return f"✗ {name(label)} → {name(predicted)}"
