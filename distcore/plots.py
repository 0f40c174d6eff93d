"""Figures and exports built from plain data (split plans, metrics records).

Pure functions: no TensorFlow, no Gradio. Every number drawn here comes from
the dict/list handed in (a split plan from the planner, metrics.jsonl records).
"""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from . import runs, split, sysmetrics  # their words for a plan, a record, a sample; no TensorFlow

EMPTY, PARTIAL, FULL = 0, 1, 2
# Discrete colour scale: grey for empty, amber for partial, blue for full.
_CELL_COLOURS = [
    [0.0, "#d9d9d9"],
    [0.33, "#d9d9d9"],
    [0.33, "#f5a623"],
    [0.66, "#f5a623"],
    [0.66, "#3b6fc4"],
    [1.0, "#3b6fc4"],  # white labels on it: 4.9:1 (WCAG AA; #4a7fd4 gives 3.98)
]
_CSV_COLUMNS = [
    "kind",
    "step",
    "epoch",
    "loss",
    "examples",
    "examples_per_sec",
    "train_loss",
    "train_accuracy",
    "test_loss",
    "test_accuracy",
    "event",
    "checkpoint",
    "message",
    "time",
]


def count(n, noun: str) -> str:
    """'1 replica', '2 replicas', '1 global batch', '3 global batches': singular for one, never
    "1 replicas" or "1 global batches"."""
    return f"{n} {noun}" + ("" if n == 1 else "es" if noun.endswith(("ch", "sh", "s", "x")) else "s")


def format_ids(ids: list[int], max_chars: int = 22) -> str:
    """Compact label for a list of example ids: runs become ranges ("0–31")."""
    if not ids:
        return "empty"
    parts, start, prev = [], ids[0], ids[0]
    for i in list(ids[1:]) + [None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        parts.append(str(start) if start == prev else f"{start},{prev}" if prev == start + 1 else f"{start}–{prev}")
        if i is not None:
            start = prev = i
    text = ",".join(parts)
    if len(text) <= max_chars:
        return text
    # Whole runs only: cutting inside one would show 19520–19529 as "19520–195,…".
    kept = []
    for part in parts:
        if len(",".join(kept + [part])) + 2 > max_chars:
            break
        kept.append(part)
    if kept:
        return ",".join(kept) + ",…"
    first = re.split("[,–]", parts[0])[0]
    label = first + ("–…" if parts[0].startswith(first + "–") else ",…")
    return label if len(label) <= max_chars else first + "…"


def cell_kind(ids: list[int], step_total: int, global_batch: int) -> int:
    """EMPTY, PARTIAL or FULL for one replica's piece of one global batch: a piece of a full
    global batch is FULL whatever its size (TensorFlow's pieces can differ, e.g. 22/22/20)."""
    if not ids:
        return EMPTY
    return FULL if step_total >= global_batch else PARTIAL


def shown_steps(n_steps: int, max_rows: int) -> list[int]:
    """Which step indices to draw: all, or the first and last few."""
    if n_steps <= max_rows:
        return list(range(n_steps))
    head = max_rows // 2
    return list(range(head)) + list(range(n_steps - (max_rows - head), n_steps))


def _step_label(step: int, row: list[list[int]], global_batch: int) -> str:
    """Steps are numbered from 1, as distcore's notes number them."""
    size = sum(len(r) for r in row)
    if size < global_batch:
        return f"step {step + 1} (partial {size}/{global_batch})"
    if size > global_batch:
        return f"step {step + 1} (holds {size})"
    return f"step {step + 1}"


def holds_more(steps: list, global_batch: int) -> bool:
    """Whether a step carries more than a global batch (FILE across workers: each worker batches its
    own files, and hands each batch out over several steps)."""
    return any(sum(len(ids) for ids in row) > global_batch for row in steps)


def steps_heading(n_steps: int, global_batch: int, over: bool) -> str:
    """'3 global batches of 4', or, `over` (holds_more), '4 steps (global batch 5)'."""
    if over:
        return f"{count(n_steps, 'step')} (global batch {global_batch})"
    return f"{count(n_steps, 'global batch')} of {global_batch}"


MAX_LOSS_POINTS = 2000  # past that, each point of the loss plot is the mean of a few steps

# A title at the top, below the toolbar a touch or a hover shows over the top 30 px, which
# would cover the title on a phone.
BELOW_TOOLBAR = {"yref": "container", "y": 1, "yanchor": "top", "pad": {"t": 34}}


def split_figure(plan: dict, max_rows: int = 12) -> go.Figure:
    """Heatmap of global batches (rows) × replicas (columns), cells labelled with ids."""
    steps = plan.get("steps") or []
    shown = plan.get("rows") or steps  # the training data's rows in training's order, else the ids
    replicas = int(plan.get("replicas") or (len(steps[0]) if steps else 1))
    global_batch = int(plan.get("global_batch") or 0)
    devices = plan.get("devices") or []
    rows = shown_steps(len(steps), max_rows)
    # Plotly does not clip a cell's text: shuffled rows (no runs to shorten) would spill into
    # the next cells at 8 replicas, or 3 on a phone. The hover has them all.
    width = 22 if replicas <= 2 else 12 if replicas <= 4 else 9 if replicas <= 8 else 6  # (16 spills at 9)
    z, text, hover, ylabels = [], [], [], []
    for i, s in enumerate(rows):
        row = list(shown[s]) + [[]] * (replicas - len(shown[s]))
        total = sum(len(ids) for ids in row)
        z.append([cell_kind(ids, total, global_batch) for ids in row])
        text.append([format_ids(sorted(ids), width) for ids in row])  # a replica's batch as a set: easier to read
        hover.append([f"{count(len(ids), 'example')}: {format_ids(sorted(ids), 200)}" for ids in row])
        gap = i > 0 and s != rows[i - 1] + 1  # steps left out above: say so in place
        ylabels.append(("⋯ " if gap else "") + _step_label(s, row, global_batch))
    xlabels = [f"replica {r}" + (f"<br>{devices[r]}" if r < len(devices) else "") for r in range(replicas)]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=xlabels,
            y=ylabels,
            text=text,
            customdata=hover,
            texttemplate="%{text}",
            textfont={"size": 13 if replicas <= 8 else 10},  # (16 overlaps at 1024 px)
            hovertemplate="%{y}, %{x}<br>%{customdata}<extra></extra>",
            colorscale=_CELL_COLOURS,
            zmin=0,
            zmax=2,
            showscale=False,
            xgap=3,
            ygap=3,
        )
    )
    # Short: plotly does not wrap a title, and a phone is about 40 characters wide.
    heading = steps_heading(len(steps), global_batch, holds_more(steps, global_batch))
    title = f"{heading} over {count(replicas, 'replica')}"
    if len(rows) < len(steps):
        title += f"<br><sup>showing the first {max_rows // 2} and last {max_rows - max_rows // 2} steps</sup>"
    fig.update_layout(
        # At the top: plotly turns 5+ replicas' labels upright on a phone, and they would reach
        # up into a title placed in the middle of the margin.
        title={
            "text": title,
            "font": {"size": 15},
            **BELOW_TOOLBAR,
            "pad": {"t": 34 if len(rows) == len(steps) else 54},
        },  # (plotly anchors a second line's)
        yaxis={"autorange": "reversed", "type": "category"},
        xaxis={"side": "top", "type": "category"},
        height=234 + 48 * max(1, len(rows)),
        margin={"l": 10, "r": 10, "t": 144, "b": 40},
    )
    fig.add_annotation(**split_legend(holds_more(steps, global_batch), bool(plan.get("rows"))))
    return fig


def split_legend(over: bool, rows: bool) -> dict:
    """The colour key, drawn under the cells (one line, about 50 characters: it fits a phone)."""
    full = "full batch piece" + (" (or more)" if over else "")
    keys = [(_CELL_COLOURS[-1][1], full), (_CELL_COLOURS[2][1], "partial batch piece"), (_CELL_COLOURS[0][1], "empty")]
    text = "   ".join(f"<span style='color:{colour}'>■</span> {what}" for colour, what in keys)
    return {
        "text": text + (" · rows sorted in each cell" if rows else ""),
        "name": "legend",
        "x": 0,
        "y": 0,
        "xref": "paper",
        "yref": "paper",
        "xanchor": "left",
        "yanchor": "top",
        "yshift": -8,
        "showarrow": False,
        "font": {"size": 12},
    }


def combine_worker_plans(result: dict) -> dict:
    """One plan from `split --workers W`: columns are every worker's replicas, rows the
    global steps all workers take together."""
    plans = result["workers"]
    rows = max(len(p["steps"]) for p in plans)

    def side_by_side(key):
        return [
            [ids for p in plans for ids in (p[key][k] if k < len(p[key]) else [[] for _ in p["devices"]])]
            for k in range(rows)
        ]

    devices = [f"worker {w} · {d}" for w, p in enumerate(plans) for d in p["devices"]]
    notes = list(result.get("notes") or []) + split.rows_note(plans[0]) + list(plans[0].get("notes") or [])[-1:]
    combined = {
        **plans[0],
        "steps": side_by_side("steps"),
        "devices": devices,
        "replicas": len(devices),
        "notes": notes,
        "tf_messages": [m for p in plans for m in p.get("tf_messages") or []],
    }
    if plans[0].get("rows"):
        combined["rows"] = side_by_side("rows")
    return combined


def split_facts(plan: dict) -> list[str]:
    """Plain sentences about partial batches and empty replicas in a plan."""
    steps = plan.get("steps") or []
    global_batch = int(plan.get("global_batch") or 0)
    sizes = split.piece_sizes({"steps": steps})
    facts = [
        f"Step {s + 1} is partial ({sum(row)} of {global_batch} examples), split {split.slashed(row)}."
        if sum(row)
        else f"Step {s + 1} carries no example: every replica's piece is empty."
        for s, row in enumerate(sizes)
        if sum(row) < global_batch
    ]
    return facts + [f"{who} got nothing in {which}." for which, who in split.empty_replicas(sizes)]


def pieces_text(plan: dict) -> str:
    """How a full global batch was cut, as the plan shows it ('' if no step is full)."""
    full = split.first_full(split.piece_sizes(plan), int(plan.get("global_batch") or 0))
    if not full:
        return ""
    if len(set(full)) == 1:
        return f" (per-replica batch {full[0]})"
    return f" (each full global batch split {split.slashed(full)})"


def split_summary(plan: dict, max_facts: int = 8, key: bool = True) -> str:
    """Markdown: the headline numbers, then what happened (distcore's notes, else our own), with
    the colour key in words unless `key` is False (beside a figure that draws it)."""
    steps = plan.get("steps") or []
    examples = sum(len(ids) for row in steps for ids in row)
    distinct = len({i for row in steps for ids in row for i in ids})
    repeats = f" ({distinct} distinct ids: some reached more than one replica)" if distinct < examples else ""
    global_batch = int(plan.get("global_batch") or 0)
    over = holds_more(steps, global_batch)
    lines = [
        f"**{examples} examples{repeats} → {steps_heading(len(steps), global_batch, over)}"
        f" on {count(plan.get('replicas'), 'replica')}**{pieces_text(plan)}."
    ]
    facts = split_facts(plan)
    if facts:
        shown = facts[:max_facts] + ([f"… and {len(facts) - max_facts} more."] if len(facts) > max_facts else [])
        lines.append(" ".join(shown))
    elif not over:
        lines.append("Every global batch is full and every replica got a piece of each.")
    # The colour key in words (`key`), for text shown without the figure, which draws split_legend.
    if key:
        lines.append(
            "\n*Cells: blue = piece of a full global batch"
            + (" (or of a step holding more: see the notes)" if over else "")
            + ", amber = piece of a partial one, grey = empty"
            + ("; each cell's rows sorted.*" if plan.get("rows") else ".*")
        )
    notes = plan.get("notes") or []
    if notes:
        lines.append("\n**What distcore saw:**")
        lines += [f"- {n}" for n in notes]
    tf_messages = plan.get("tf_messages") or []
    if tf_messages:
        lines.append("\n**TensorFlow logged:**")
        lines += [f"- `{m}`" for m in tf_messages[:5]]
    return "\n".join(lines) + split_table(plan)


MAX_TABLE_STEPS = 200


def split_table(plan: dict, max_rows: int = MAX_TABLE_STEPS) -> str:
    """Every shown step's ids per replica as a table, folded away under the notes: the plot's
    cells show the first few ids and its hover the rest, which a keyboard or a screen reader
    cannot reach, and past 12 steps the middle ones are not drawn."""
    steps = plan.get("steps") or []
    if not steps:
        return ""
    shown = plan.get("rows") or steps
    replicas = int(plan.get("replicas") or len(steps[0]))
    global_batch = int(plan.get("global_batch") or 0)
    rows = shown_steps(len(steps), max_rows)
    which = (
        "every step's"
        if len(rows) == len(steps)
        else f"the first {max_rows // 2} and last {max_rows - max_rows // 2} steps'"
    )
    lines = [
        "",
        "",
        f"<details><summary>The split as a table: {which} ids, replica by replica</summary>",
        "",
        "| step | " + " | ".join(f"replica {r}" for r in range(replicas)) + " |",
        "|---" * (replicas + 1) + "|",
    ]
    for s in rows:
        row = list(shown[s]) + [[]] * (replicas - len(shown[s]))
        cells = [format_ids(sorted(ids), max_chars=10**9).replace(",", ", ") for ids in row]  # (wraps)
        lines.append(f"| {_step_label(s, row, global_batch)} | " + " | ".join(cells) + " |")
    return "\n".join(lines + ["", "</details>"])


def step_records(metrics: list[dict]) -> list[dict]:
    """Per-step records, one per step (the latest wins after a resume)."""
    by_step = {}
    for m in metrics:
        if runs.is_step_record(m):
            by_step[m["step"]] = m
    return [by_step[s] for s in sorted(by_step)]


def binned_losses(
    steps: list[dict], max_points: int = MAX_LOSS_POINTS, key: str = "loss"
) -> tuple[list, list, int, list]:
    """(steps, values of `key`, k, first steps): one point a step, or past `max_points` steps, the
    mean of each k consecutive steps at the last of them. Every point of a 20-epoch run would make
    each redraw, every 2 s while it trains, 479 KB and 0.25 s of the app's CPU per open page."""
    k = max(1, math.ceil(len(steps) / max_points))
    groups = [steps[i : i + k] for i in range(0, len(steps), k)]
    return (
        [g[-1]["step"] for g in groups],
        [mean([m.get(key) for m in g]) for g in groups],
        k,
        [g[0]["step"] for g in groups],
    )


def mean(values: list) -> float | None:
    """The mean of the numbers among `values` (None when there is none)."""
    numbers = [v for v in values if isinstance(v, (int, float))]
    return sum(numbers) / len(numbers) if numbers else None


def epoch_records(metrics: list[dict]) -> list[dict]:
    """Per-epoch evaluation records, one per epoch (the latest wins)."""
    by_epoch = {}
    for m in metrics:
        if runs.is_epoch_record(m):
            by_epoch[m["epoch"]] = m
    return [by_epoch[e] for e in sorted(by_epoch)]


CLASSIFIER_EPOCH_METRICS = ("loss", "accuracy")  # what a classifier's epoch records hold


def epoch_metric_names(metrics: list[dict]) -> list[str]:
    """The metrics the epoch records measure, "train_"/"test_" taken off, in first-seen order (the
    classifier's loss and accuracy; the GAN's d_loss and g_loss). Before the first epoch ends, the
    step records' names, or the classifier's when the steps report a loss."""
    names = {}
    for record in epoch_records(metrics):
        for key in runs.record_scalars(record):
            names[key.removeprefix("train_").removeprefix("test_")] = None
    if names:
        return list(names)
    steps = runs.step_metric_names(metrics)
    return list(CLASSIFIER_EPOCH_METRICS) if steps in ([], ["loss"]) else steps


def _empty_note(fig: go.Figure, text: str, panels: int = 1) -> go.Figure:
    """No data yet: blank axes (not Plotly's default -1..6) and the note in each panel's middle."""
    blank = {"showticklabels": False, "showgrid": False, "zeroline": False, "range": [0, 1]}
    fig.update_xaxes(**blank)
    fig.update_yaxes(**blank)
    for n in range(1, panels + 1):
        suffix = "" if n == 1 else str(n)
        # Plotly draws a panel beyond the first only when a trace is on its axes.
        if n > 1 and not any(trace.xaxis == f"x{n}" for trace in fig.data):
            fig.add_trace(go.Scatter(x=[], y=[], xaxis=f"x{n}", yaxis=f"y{n}", showlegend=False, hoverinfo="skip"))
        fig.add_annotation(
            text=text,
            showarrow=False,
            xref=f"x{suffix} domain",
            yref=f"y{suffix} domain",
            x=0.5,
            y=0.5,
            font={"size": 14, "color": "#666"},
        )
    return fig


STEP_COLOURS = ("#3b6fc4", "#e4572e", "#2a9d8f", "#8e6cc1", "#d4a017", "#6b6b6b")


def loss_figure(metrics: list[dict], saved: list[int] | None = None, l2: float = 0) -> go.Figure:
    """Every scalar the task reports per step (the classifier's loss; the GAN's d_loss and g_loss,
    together), with checkpoints marked: the steps in `saved` (those on disk), else the checkpoint
    records in the metrics. With an `l2` weight the loss includes its penalty."""
    steps = step_records(metrics)
    names = runs.step_metric_names(steps) or ["loss"]
    fig = go.Figure()
    per_point = 1
    for i, name in enumerate(names):
        x, y, per_point, first = binned_losses(steps, key=name)
        # A binned point's hover names the steps it averages, not only its last one.
        # (",d": else the x value takes the axis's "10.392k" beside a raw first step.)
        label = "training loss" if name == "loss" else name
        ranged = {
            "customdata": first,
            "hovertemplate": f"steps %{{customdata:,d}}–%{{x:,d}}<br>mean {name} %{{y:.4f}}<extra></extra>",
        }
        fig.add_trace(
            go.Scatter(
                x=x,
                y=y,
                mode="lines+markers" if len(steps) < 60 else "lines",
                name=label,
                marker={"size": 4},
                line={"color": STEP_COLOURS[i % len(STEP_COLOURS)]} if len(names) > 1 else None,
                **(ranged if per_point > 1 else {}),
            )
        )
    # The checkpoints as one trace of vertical segments (on a hidden 0-1 axis): one add_vline
    # each grows quadratically, 38 s for 400 checkpoints, at every redraw of a training run.
    if saved is None:
        saved = [m["step"] for m in metrics if m.get("event") == "checkpoint" and "step" in m]
    fig.add_trace(
        go.Scatter(
            x=[x for s in saved for x in (s, s, None)],
            y=[y for _ in saved for y in (0, 1, None)],
            yaxis="y2",
            mode="lines",
            name="checkpoint",
            showlegend=False,
            hoverinfo="x+name",
            line={"dash": "dot", "color": "#777", "width": 1},
        )
    )
    notes = ([f"each point: the mean of {per_point} steps"] if per_point > 1 else []) + (
        ["dotted lines: checkpoints"] if saved else []
    )  # (they have no legend)
    note = {"subtitle": {"text": " · ".join(notes)}} if notes else {}
    if names == ["loss"]:
        title = "Training loss per step" + (" (+ L2 penalty)" if l2 else "")
        y_title = "loss + L2 penalty" if l2 else "loss"
    else:
        title = f"{' and '.join(names)} per step"
        y_title = "loss" if all(name.endswith("loss") for name in names) else "value"
    # One line: no legend, the title names it (beside the plot a legend takes 40% of a phone's
    # width). Several: a legend under the plot names each.
    fig.update_layout(
        title={"text": title, **note, **BELOW_TOOLBAR},
        xaxis_title="step",
        yaxis_title=y_title,
        showlegend=len(names) > 1,
        legend={"orientation": "h", "x": 0, "y": -0.2},
        yaxis2={"overlaying": "y", "range": [0, 1], "visible": False, "fixedrange": True},
        height=350,
        margin={"l": 10, "r": 10, "t": 90, "b": 10},
    )
    return fig if steps else _empty_note(fig, "no steps yet")


PANEL_TITLES = {"loss": "Loss", "accuracy": "Accuracy"}


def epoch_figure(metrics: list[dict], l2: float = 0) -> go.Figure:
    """Each metric the epoch records measure, train and test side by side in a panel of its own
    (the classifier's loss and accuracy; the GAN's d_loss and g_loss). With an L2 weight (`l2`)
    the training loss includes the penalty, as the tutorial's does, and the test loss does not:
    the legend says so, or the gap would read as overfitting."""
    epochs = epoch_records(metrics)
    names = epoch_metric_names(metrics)
    titles = [PANEL_TITLES.get(name, name) for name in names]
    fig = make_subplots(rows=1, cols=len(names), subplot_titles=titles)  # the panel says "per epoch"
    x = [m["epoch"] for m in epochs]
    for col, name in enumerate(names, start=1):
        for key, colour in ((f"train_{name}", "#4a7fd4"), (f"test_{name}", "#e4572e"), (name, "#2a9d8f")):
            if (epochs or key == name) and not any(key in m for m in epochs):
                continue  # (no records yet: a panel's train and test lines, empty)
            label = key.replace("_", " ", 1) if key != name else name
            if name == "loss" and l2:
                label = "train loss + L2 penalty" if key == "train_loss" else "test loss (no penalty)"
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=[m.get(key) for m in epochs],
                    name=label,
                    mode="lines+markers",
                    line={"color": colour, "dash": "dash" if key.startswith("test_") else "solid"},
                ),
                row=1,
                col=col,
            )
    fig.update_xaxes(title_text="epoch", dtick=1)
    heading = "Loss and accuracy" if names == list(CLASSIFIER_EPOCH_METRICS) else " and ".join(names)
    # The legend under the plots, not beside them: beside, it takes 40% of a phone's width.
    fig.update_layout(
        title={"text": f"{heading} per epoch", **BELOW_TOOLBAR},
        height=400,
        margin={"l": 10, "r": 10, "t": 90, "b": 10},
        legend={"orientation": "h", "x": 0, "y": -0.25},
    )
    # On two lines: on a phone one line runs out of each half-width panel.
    return fig if epochs else _empty_note(fig, "no finished<br>epoch yet", panels=len(names))


def confusion_figure(confusion: list[list[int]], class_names: list[str]) -> go.Figure:
    """Confusion matrix heatmap: rows are true classes, columns predicted."""
    names = list(class_names)[: len(confusion)]
    fig = go.Figure(
        go.Heatmap(
            z=confusion,
            x=names,
            y=names,
            text=confusion,
            texttemplate="%{text}",
            colorscale="Blues",
            showscale=False,
            hovertemplate="true %{y}<br>predicted %{x}<br>%{z} images<extra></extra>",
        )
    )
    fig.update_layout(
        title="Confusion matrix<br><sup>rows: true class, columns: predicted</sup>",
        xaxis={"title": "predicted", "type": "category"},
        yaxis={"title": "true", "type": "category", "autorange": "reversed"},
        height=520,
        margin={"l": 10, "r": 10, "t": 70, "b": 10},
    )
    return fig


def _kind(m: dict) -> str:
    if "event" in m:
        return "checkpoint" if m["event"] == "checkpoint" else "event"
    return "epoch" if runs.is_epoch_record(m) else "step"


def metrics_csv(metrics: list[dict], path: str | Path) -> Path:
    """Write all metrics records to one CSV (a `kind` column tells them apart)."""
    path = Path(path)
    extra = sorted({k for m in metrics for k in m} - set(_CSV_COLUMNS))
    columns = _CSV_COLUMNS + extra
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        for m in metrics:
            writer.writerow({**m, "kind": _kind(m)})
    return path


def sampled_times(rows: list[dict], start: float) -> tuple[list[float], list[dict | None]]:
    """Seconds since `start` of each sample, and the samples; where no process sampled for more
    than three sampling intervals (a run stopped, then resumed), a None sample between two
    times, so the lines break there rather than join the gap with a straight line."""
    xs, out = [], []
    for row in rows:
        t = row["time"] - start
        if xs and t - xs[-1] > 3 * sysmetrics.INTERVAL:
            xs.append(round((t + xs[-1]) / 2, 1))
            out.append(None)
        xs.append(round(t, 1))
        out.append(row)
    return xs, out


def system_figure(samples, x_title: str = "seconds since the first sample", zero: float | None = None) -> go.Figure:
    """A training process's CPU (% of one core: 200 is two cores busy) and resident memory over
    time, from runs.read_system; GPU utilisation and memory too where they were recorded.
    `samples`: one run's list, or {run name: list} to overlay runs (one colour each). `zero`: the
    time drawn as 0 (None: each run's first sample)."""
    by_run = samples if isinstance(samples, dict) else {"": samples}
    fig = make_subplots(rows=1, cols=2, subplot_titles=("CPU, % of one core", "Memory, MB"))
    palette = ("#4a7fd4", "#e4572e", "#2a9d8f", "#8e6cc1", "#d4a017", "#6b6b6b")
    for i, (name, rows) in enumerate(by_run.items()):
        if not rows:
            continue
        start, colour = rows[0]["time"] if zero is None else zero, palette[i % len(palette)]
        x, rows = sampled_times(rows, start)
        panels = [
            ("cpu_percent", 1, 1, "CPU", "solid"),
            ("gpu_util", 1, 1, "GPU", "dash"),
            ("rss_bytes", 2, 2**20, "RSS", "solid"),
            ("gpu_mem_bytes", 2, 2**20, "GPU memory", "dash"),
        ]
        for key, col, scale, what, dash in panels:
            if not any(r and key in r for r in rows):
                continue
            label = f"{name} · {what}" if name else what
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=[r[key] / scale if r and key in r else None for r in rows],
                    name=label,
                    mode="lines",
                    line={"color": colour, "dash": dash},
                    legendgroup=name or what,
                    hovertemplate=f"{label}<br>%{{x}} s: %{{y:,.1f}}<extra></extra>",
                ),
                row=1,
                col=col,
            )
    fig.update_xaxes(title_text=x_title)
    fig.update_layout(
        title={"text": "System: the training process", **BELOW_TOOLBAR},
        height=330,
        margin={"l": 10, "r": 10, "t": 90, "b": 10},
        legend={"orientation": "h", "x": 0, "y": -0.3},
    )
    return fig if any(by_run.values()) else _empty_note(fig, "no samples yet", panels=2)
