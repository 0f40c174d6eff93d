"""Comparing runs: the table of the runs folder, the curves to overlay, the configuration fields
that differ, TensorBoard's smoothing, and the CSV of a comparison.

Everything is read from the run folders (config.json, metrics.jsonl, status.json, notes.txt);
pure functions of plain data, no TensorFlow, no Gradio.
"""

from __future__ import annotations

import bisect
import csv
import math
import time
from pathlib import Path

from . import follow, jobs, manage, plots, runs
from .config import DistcoreError

X_AXES = {"step": "step", "examples": "examples seen", "time": "training time, s"}
DEFAULT_PICKS = 5  # a tab opened with no pick compares the newest runs, this many
MAX_PICKS = 12  # more traces than a legend can name
MAX_POINTS = 2000  # per trace: past it, each point is the mean of a few steps (plots.binned_losses)
TABLE_COLUMNS = (
    "name",
    "task",
    "model",
    "devices",
    "replicas",
    "workers",
    "global_batch",
    "policy",
    "status",
    "steps",
    "test_accuracy",
    "examples_per_sec",
    "wall_seconds",
    "started",
    "notes",
)
# Fields that say nothing of how two runs differ as experiments.
NOT_COMPARED = {"data_dir", "physical_devices"}


def smooth(values: list[float], weight: float) -> list[float]:
    """TensorBoard's scalar smoothing: an exponential moving average, debiased as Adam's moments
    are, so the first points are not pulled towards 0. `weight` in [0, 1): 0 leaves the values
    as they are. Values that are not finite are kept as they are and skipped by the average."""
    weight = check_weight(weight)
    last, count, out = 0.0, 0, []
    for v in values:
        if v is None or not math.isfinite(v):
            out.append(v)
            continue
        last = last * weight + (1 - weight) * v
        count += 1
        out.append(last / (1 - weight**count) if weight else v)
    return out


def check_weight(weight) -> float:
    try:
        weight = float(weight)
    except (TypeError, ValueError):
        raise DistcoreError(f"smoothing ({weight!r}) must be a number from 0 (none) to 0.99.") from None
    if not 0 <= weight <= 0.99:
        raise DistcoreError(f"smoothing ({weight}) must be from 0 (none) to 0.99.")
    return weight


def check_x_axis(x_axis: str) -> str:
    if x_axis not in X_AXES:
        raise DistcoreError(f"x-axis {x_axis!r} is not one of {', '.join(X_AXES)}.")
    return x_axis


def start_time(metrics: list[dict]) -> float | None:
    """When the run first started training: its first start (or resume) event."""
    first = next((m for m in metrics if m.get("event") in ("start", "resume")), None)
    return first.get("time") if first else (metrics[0].get("time") if metrics else None)


def segments(metrics: list[dict]) -> list[tuple[float, float]]:
    """(first, last) time of each process that trained the run: from its start or resume event
    to its last record. The time between a stop and a resume (or a finish and "train more") is
    in none of them."""
    out: list[list[float]] = []
    for m in metrics:
        t = m.get("time")
        if not isinstance(t, (int, float)):
            continue
        if m.get("event") in ("start", "resume"):
            out.append([t, t])
        elif out:
            out[-1][1] = max(out[-1][1], t)
    return [(a, b) for a, b in out]


def wall_seconds(metrics: list[dict]) -> float | None:
    """Seconds spent training: each process's time (segments), summed."""
    spans = segments(metrics)
    return round(sum(b - a for a, b in spans), 1) if spans else None


def training_clock(metrics: list[dict], spans: list[tuple[float, float]] | None = None):
    """A function from a record's time to seconds of training before it (the x of the "time"
    axis): each process's time counts, the idle time between processes does not. With no start
    event, seconds since the first record. `spans`: segments(metrics), when already read."""
    spans = segments(metrics) if spans is None else spans
    if not spans:
        first = next((m["time"] for m in metrics if isinstance(m.get("time"), (int, float))), 0.0)
        return lambda t: round(t - first, 3)
    starts = [a for a, _ in spans]
    before = [sum(b - a for a, b in spans[:i]) for i in range(len(spans))]

    def clock(t: float) -> float:
        i = max(bisect.bisect_right(starts, t) - 1, 0)
        into = t - starts[i]
        if i < len(spans) - 1:  # between a process's last record and the next one's start (its set-up)
            into = min(into, spans[i][1] - starts[i])
        return round(before[i] + into, 3)

    return clock


def final_accuracy(metrics: list[dict]) -> float | None:
    """The last test accuracy the run logged (an epoch's end or a checkpoint's)."""
    tested = [m["test_accuracy"] for m in metrics if isinstance(m.get("test_accuracy"), (int, float))]
    return tested[-1] if tested else None


def run_row(run_dir) -> dict:
    """One line of the table: what the run is, how it went, and its notes."""
    run_dir = Path(run_dir)
    config, _damaged = runs.shown_config(run_dir)
    metrics = runs.read_metrics(run_dir)
    steps = [m["step"] for m in plots.step_records(metrics)]
    began = start_time(metrics)
    speed, accuracy = jobs.mean_speed(metrics), final_accuracy(metrics)
    devices = config.get("devices") or []
    task = config.get("task", "classifier")
    return {
        "name": run_dir.name,
        "task": task,
        "model": config.get("model") if task == "classifier" else None,  # other tasks bring their own
        "devices": ",".join(devices) if isinstance(devices, list) else str(devices),
        "replicas": len(devices) * (config.get("workers") or 1) if isinstance(devices, list) and devices else None,
        "workers": config.get("workers", 1),
        "global_batch": config.get("global_batch"),
        "policy": config.get("policy"),
        "status": jobs.run_state(run_dir, metrics=metrics),
        "steps": steps[-1] if steps else 0,
        "test_accuracy": round(accuracy, 4) if accuracy is not None else None,
        "examples_per_sec": round(speed, 1) if speed else None,
        "wall_seconds": wall_seconds(metrics),
        "started": time.strftime("%Y-%m-%d %H:%M", time.localtime(began)) if began else None,
        "notes": manage.read_notes(run_dir),
    }


def table(runs_root) -> list[dict]:
    """The runs folder's runs, newest first, one row each."""
    return [run_row(Path(runs_root) / name) for name in follow.run_names(runs_root)]


def default_picks(runs_root, names: list[str] | None = None) -> list[str]:
    """What a tab opened with no pick compares: the newest runs with at least one logged step."""
    names = follow.run_names(runs_root) if names is None else names
    return [n for n in names if (Path(runs_root) / n / "metrics.jsonl").is_file()][:DEFAULT_PICKS]


def picked_dirs(runs_root, picks) -> list[Path]:
    """The picked runs' folders, by name (each checked to lie inside the runs folder)."""
    picks = list(dict.fromkeys(picks or []))
    if len(picks) > MAX_PICKS:
        raise DistcoreError(f"{len(picks)} runs are picked; compare at most {MAX_PICKS} at once.")
    return [follow.existing_run(runs_root, name) for name in picks]


def loss_series(metrics: list[dict], x_axis: str = "step", weight: float = 0.0, key: str = "loss") -> dict:
    """A step scalar (the training loss; `key` names another, as the GAN's d_loss) against step,
    examples seen or seconds of training (training_clock), raw and smoothed; past
    MAX_POINTS steps each point is the mean of a few. Empty for a run whose steps lack it."""
    check_x_axis(x_axis)
    steps = [m for m in plots.step_records(metrics) if isinstance(m.get(key), (int, float))]
    seen, xs = 0, []
    times = step_times(steps, metrics)
    for m, t in zip(steps, times):
        seen += m.get("examples", 0)
        xs.append({"step": m["step"], "examples": seen, "time": t}[x_axis])
    raw = [m[key] for m in steps]
    smoothed = smooth(raw, weight)
    k = max(1, math.ceil(len(steps) / MAX_POINTS))
    if k > 1:  # means of k steps at the last of them
        xs, raw, smoothed = (
            [xs[min(i + k, len(xs)) - 1] for i in range(0, len(xs), k)],
            [sum(raw[i : i + k]) / len(raw[i : i + k]) for i in range(0, len(raw), k)],
            [smoothed[min(i + k, len(smoothed)) - 1] for i in range(0, len(smoothed), k)],
        )
    return {"x": xs, "raw": raw, "smoothed": smoothed, "per_point": k}


def on_training_clock(samples: list[dict], metrics: list[dict]) -> list[dict]:
    """System samples with their time as seconds of training (training_clock), to draw beside
    the curves on the same axis."""
    clock = training_clock(metrics)
    return [{**row, "time": clock(row["time"])} for row in samples]


def step_times(steps: list[dict], metrics: list[dict]) -> list[float]:
    """Seconds of training before each step (training_clock). A loop's records are written
    together, at its end: its steps are spread evenly over the loop's time (from the loop before
    it, or from its process's start), not drawn as one vertical jump."""
    spans = segments(metrics)
    clock, starts = training_clock(metrics, spans), [a for a, _ in spans]
    out, i = [], 0
    previous = starts[0] if starts else steps[0].get("time", 0.0) if steps else 0.0
    while i < len(steps):
        t = steps[i].get("time", previous)
        j = i
        while j < len(steps) and steps[j].get("time", previous) == t:
            j += 1
        n = j - i
        previous = max([previous] + [a for a in starts if a <= t])  # a new process starts its own clock
        out += [clock(previous + (t - previous) * (k + 1) / n) for k in range(n)]
        previous, i = t, j
    return out


EPOCH_KEYS = ("epoch", "test_accuracy", "test_loss", "train_loss")  # the classifier's, always listed


def epoch_series(metrics: list[dict]) -> dict:
    """Per epoch: the classifier's test accuracy, test and train loss (None where a run has none),
    and every other test metric its records hold (the GAN's test_d_loss and test_g_loss)."""
    epochs = plots.epoch_records(metrics)
    keys = dict.fromkeys(EPOCH_KEYS)
    for record in epochs:
        keys.update(dict.fromkeys(k for k in runs.record_scalars(record) if k.startswith("test_")))
    return {key: [m.get(key) for m in epochs] for key in keys}


def scalar_series(metrics: list[dict], x_axis: str, weight: float) -> dict:
    """The step scalars other than the loss (the GAN's d_loss and g_loss), each as loss_series."""
    names = [name for name in runs.step_metric_names(metrics) if name != "loss"]
    return {name: loss_series(metrics, x_axis, weight, key=name) for name in names}


def speed_series(metrics: list[dict]) -> dict:
    """examples/s of each timed loop, against seconds of training (training_clock; a loop's
    records share its speed: one point a loop). A resume holds None, so the line breaks where
    another process took over rather than join its two sides."""
    clock = training_clock(metrics)
    xs, ys = [], []
    for m in metrics:
        if m.get("event") == "resume" and ys and ys[-1] is not None:
            xs.append(clock(m.get("time", 0.0)))
            ys.append(None)
        elif runs.is_step_record(m) and m.get("examples_per_sec"):
            x = clock(m.get("time", 0.0))
            if xs and xs[-1] == x and ys[-1] is not None:  # the loop's other records
                continue
            xs.append(x)
            ys.append(m["examples_per_sec"])
    if ys and ys[-1] is None:  # resumed, not timed yet: nothing to break
        xs.pop()
        ys.pop()
    return {"x": xs, "y": ys}


def comparison(runs_root, picks, x_axis: str = "step", weight: float = 0.0) -> dict:
    """Everything the Compare view draws for the picked runs (names, in order): per run its
    series, and the configuration fields that differ between them."""
    check_x_axis(x_axis)
    check_weight(weight)
    out = {"x_axis": x_axis, "smoothing": weight, "runs": [], "differences": []}
    configs = {}
    for run_dir in picked_dirs(runs_root, picks):
        metrics = runs.read_metrics(run_dir)
        configs[run_dir.name] = runs.shown_config(run_dir)[0]
        out["runs"].append(
            {
                "name": run_dir.name,
                "loss": loss_series(metrics, x_axis, weight),
                "scalars": scalar_series(metrics, x_axis, weight),
                "epochs": epoch_series(metrics),
                "speed": speed_series(metrics),
                "system": on_training_clock(runs.read_system(run_dir), metrics),
            }
        )
    out["differences"] = differences(configs)
    return out


def differences(configs: dict[str, dict]) -> list[dict]:
    """The configuration fields whose values differ between the runs ({name: config.json}),
    one row each: {"field": ..., name: value, ...}. A field one run lacks shows as None."""
    if len(configs) < 2:
        return []
    fields = sorted({k for c in configs.values() for k in c} - NOT_COMPARED)
    rows = []
    for field in fields:
        values = {name: shown(c.get(field)) for name, c in configs.items()}
        if len(set(map(repr, values.values()))) > 1:
            rows.append({"field": field, **values})
    return rows


def shown(value):
    return ",".join(map(str, value)) if isinstance(value, list) else value


def write_csv(result: dict, path) -> Path:
    """The comparison as one CSV: a row per run and step (x, loss, smoothed loss; a GAN's d_loss
    and g_loss, each with its smoothed value) and per run and epoch (test accuracy and loss, and
    other test metrics); `kind` tells them apart."""
    path = Path(path)
    step_names = list(dict.fromkeys(name for run in result["runs"] for name in run.get("scalars", {})))
    every_epoch_key = dict.fromkeys(k for run in result["runs"] for k in run["epochs"])
    epoch_keys = [k for k in every_epoch_key if k not in ("epoch", "train_loss")]
    columns = ["run", "kind", "x_axis", "x", "loss", "smoothed_loss"]
    columns += [c for name in step_names for c in (name, f"smoothed_{name}")] + ["epoch", *epoch_keys]
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for run in result["runs"]:
            series = {"loss": run["loss"], **run.get("scalars", {})}
            rows = {}  # (position, x) -> the row of that step: a task's step scalars share their steps
            for name, values in series.items():
                smoothed_key = "smoothed_loss" if name == "loss" else f"smoothed_{name}"
                for i, (x, raw, smoothed) in enumerate(zip(values["x"], values["raw"], values["smoothed"])):
                    blank = {"run": run["name"], "kind": "step", "x_axis": result["x_axis"], "x": x}
                    row = rows.setdefault((i, x), blank)
                    row.update({name: raw, smoothed_key: smoothed})
            writer.writerows(rows.values())
            ep = run["epochs"]
            for i, epoch in enumerate(ep["epoch"]):
                writer.writerow(
                    {
                        "run": run["name"],
                        "kind": "epoch",
                        "epoch": epoch,
                        **{k: ep[k][i] for k in epoch_keys if k in ep},
                    }
                )
    return path
