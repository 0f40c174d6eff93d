"""The Compare view's figures: runs overlaid (loss, test accuracy and loss per epoch, examples/s,
system use) and a sweep's scaling chart. Pure functions of compare.comparison() and a sweep's
record; no TensorFlow, no Gradio. One colour per run, the same in every figure."""

from __future__ import annotations

import math

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from . import compare, plots

PALETTE = ("#3b6fc4", "#e4572e", "#2a9d8f", "#8e6cc1", "#d4a017", "#6b6b6b", "#c2185b", "#00838f")
MARGIN = {"l": 10, "r": 10, "t": 90, "b": 10}


def colour(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


DASHES = ("solid", "dot", "dash", "dashdot")  # a run's step scalars after its loss, one dash each


def run_series(run: dict) -> list[tuple[str, dict]]:
    """(trace name, series) of each step scalar of a run: its loss, named by the run alone; any
    other (the GAN's d_loss and g_loss) as 'run · d_loss'."""
    named = [(run["name"], run["loss"])] if run["loss"]["x"] else []
    return named + [(f"{run['name']} · {key}", series) for key, series in run.get("scalars", {}).items() if series["x"]]


def loss_figure(result: dict, log_y: bool = False) -> go.Figure:
    """Training loss of each run, named by run, and a GAN's d_loss and g_loss as 'run · d_loss'
    (one colour a run, one dash a scalar): the smoothed curve, with the raw one faint behind it
    (raw alone when smoothing is 0)."""
    fig = go.Figure()
    smoothing = result.get("smoothing", 0)
    for i, run in enumerate(result["runs"]):
        for j, (name, loss) in enumerate(run_series(run)):
            line = {"color": colour(i), "dash": DASHES[j % len(DASHES)]}
            if smoothing:
                fig.add_trace(
                    go.Scatter(
                        x=loss["x"],
                        y=loss["raw"],
                        mode="lines",
                        name=f"{name} (raw)",
                        legendgroup=name,
                        showlegend=False,
                        opacity=0.25,
                        line={**line, "width": 1},
                        hoverinfo="skip",
                    )
                )
            fig.add_trace(
                go.Scatter(
                    x=loss["x"],
                    y=loss["smoothed"] if smoothing else loss["raw"],
                    mode="lines",
                    name=name,
                    legendgroup=name,
                    line={**line, "width": 2},
                    hovertemplate=f"{name}<br>%{{x:,}}: %{{y:.4f}}<extra></extra>",
                )
            )
    subtitle = f"smoothing {smoothing:g} (raw faint)" if smoothing else "raw"
    per_point = max((s["per_point"] for r in result["runs"] for _, s in run_series(r)), default=1)
    if per_point > 1:
        subtitle += f" · a point: up to {per_point} steps"
    fig.update_layout(
        title={"text": "Training loss", "subtitle": {"text": subtitle}, **plots.BELOW_TOOLBAR},
        xaxis_title=compare.X_AXES[result["x_axis"]],
        yaxis={"title": "loss", **(log_axis(fig) if log_y else {"type": "linear"})},
        height=420,
        margin=MARGIN,
        legend={"orientation": "h", "x": 0, "y": -0.2},
    )
    return fig if len(fig.data) else plots._empty_note(fig, "no steps yet in the picked runs")


def log_axis(fig: go.Figure) -> dict:
    """A log axis labelled with whole values (0.3, 0.5, 1, 2, ...) over the figure's data: Plotly's
    own labels a decade's steps with their first digit alone ("9, 8, 7 ... 2"), so 0.5 reads "5".
    A range too narrow for two such values gets its ticks in three digits."""
    values = [v for trace in fig.data for v in (trace.y or ()) if isinstance(v, (int, float)) and v > 0]
    if not values:
        return {"type": "log"}
    low, high = min(values), max(values)
    decades = range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
    ticks = [m * 10.0**e for e in decades for m in (1, 2, 3, 5) if low <= m * 10.0**e <= high]
    if len(ticks) < 2:
        return {"type": "log", "tickformat": ".3g"}
    return {"type": "log", "tickvals": ticks, "ticktext": [f"{t:g}" for t in ticks]}


def epoch_figure(result: dict) -> go.Figure:
    """Test accuracy and test loss per epoch, one line per run; a run with no accuracy (a GAN)
    draws its test losses (test d_loss, test g_loss) in the loss panel, named 'run · d_loss'."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("Test accuracy", "Test loss"))
    for i, run in enumerate(result["runs"]):
        ep = run["epochs"]
        others = [k for k in ep if k not in compare.EPOCH_KEYS]  # the GAN's test_d_loss, test_g_loss
        lines = [(1, "test_accuracy", run["name"], "solid"), (2, "test_loss", run["name"], "solid")]
        lines += [(2, k, f"{run['name']} · {k.removeprefix('test_')}", DASHES[1 + j % 3]) for j, k in enumerate(others)]
        drawn = [line for line in lines if any(v is not None for v in ep[line[1]])] or lines[:2]
        named = set()  # a run's name in the legend once, as its first line's
        for col, key, name, dash in drawn:
            fig.add_trace(
                go.Scatter(
                    x=ep["epoch"],
                    y=ep[key],
                    name=name,
                    legendgroup=name,
                    showlegend=name not in named,
                    mode="lines+markers",
                    line={"color": colour(i), "dash": dash},
                ),
                row=1,
                col=col,
            )
            named.add(name)
    fig.update_xaxes(title_text="epoch", dtick=1)
    fig.update_layout(
        title={"text": "Per epoch", **plots.BELOW_TOOLBAR},
        height=360,
        margin=MARGIN,
        legend={"orientation": "h", "x": 0, "y": -0.3},
    )
    has = any(r["epochs"]["epoch"] for r in result["runs"])
    return fig if has else plots._empty_note(fig, "no finished<br>epoch yet", panels=2)


def speed_figure(result: dict) -> go.Figure:
    """examples/s of each timed loop against seconds of training, one line per run."""
    fig = go.Figure()
    for i, run in enumerate(result["runs"]):
        if run["speed"]["x"]:
            fig.add_trace(
                go.Scatter(
                    x=run["speed"]["x"],
                    y=run["speed"]["y"],
                    name=run["name"],
                    mode="lines+markers",
                    line={"color": colour(i)},
                    marker={"size": 4},
                )
            )
    fig.update_layout(
        title={"text": "Examples/s", **plots.BELOW_TOOLBAR},
        xaxis_title="training time, s",
        yaxis_title="examples/s",
        height=360,
        margin=MARGIN,
        legend={"orientation": "h", "x": 0, "y": -0.3},
    )
    return fig if len(fig.data) else plots._empty_note(fig, "no timed loop yet")


def system_figure(result: dict) -> go.Figure:
    """CPU and memory of each picked run's training process (plots.system_figure, overlaid)."""
    samples = {run["name"]: run["system"] for run in result["runs"]}  # their time: seconds of training
    return plots.system_figure(samples, "training time, s", zero=0.0)


def scaling_figure(record: dict | None) -> go.Figure:
    """A sweep's examples/s against replicas, with the ideal line (the fewest replicas' speed
    times the replica ratio), each point labelled with its speed-up and efficiency."""
    entries = [e for e in (record or {}).get("entries", []) if e.get("examples_per_sec") and e.get("replicas")]
    fig = go.Figure()
    if entries:
        base = min(entries, key=lambda e: e["replicas"])
        top = max(e["replicas"] for e in entries)
        xs = sorted({base["replicas"], top, *(e["replicas"] for e in entries)})
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=[base["examples_per_sec"] * x / base["replicas"] for x in xs],
                mode="lines",
                name="ideal (linear)",
                line={"dash": "dash", "color": "#999"},
            )
        )
        for workers in sorted({e["workers"] for e in entries}):
            group = sorted((e for e in entries if e["workers"] == workers), key=lambda e: e["replicas"])
            fig.add_trace(
                go.Scatter(
                    x=[e["replicas"] for e in group],
                    y=[e["examples_per_sec"] for e in group],
                    mode="lines+markers+text",
                    name="one process" if workers == 1 else f"{workers} worker processes",
                    text=[f"×{e['speedup']:.2f} · {e['efficiency']:.0%}" for e in group],
                    textposition="top center",
                    customdata=[e["run"] for e in group],
                    marker={"size": 9},
                    hovertemplate="%{customdata}<br>%{x} replicas: %{y:,.0f} examples/s<extra></extra>",
                )
            )
    fig.update_layout(
        title={
            "text": "Scaling: examples/s by replicas",
            "subtitle": {"text": "labels: speed-up · efficiency"},
            **plots.BELOW_TOOLBAR,
        },
        xaxis={"title": "replicas", "dtick": 1},
        yaxis={"title": "examples/s", "rangemode": "tozero"},
        height=400,
        margin=MARGIN,
        legend={"orientation": "h", "x": 0, "y": -0.25},
    )
    return fig if entries else plots._empty_note(fig, "no sweep measured yet")
