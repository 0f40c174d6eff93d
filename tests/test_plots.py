"""distcore.plots: pure functions of plain data (no TensorFlow, no Gradio)."""

import csv
import re

from hypothesis import given, settings, strategies as st

from distcore import plots


def plan(steps, global_batch, notes=()):
    return {
        "steps": steps,
        "replicas": len(steps[0]),
        "global_batch": global_batch,
        "per_replica_batch": global_batch // len(steps[0]),
        "devices": [f"cpu:{i}" for i in range(len(steps[0]))],
        "notes": list(notes),
    }


# The seed's examples, reproducible by hand.
N6_G4_R2 = plan([[[0, 1], [2, 3]], [[4], [5]]], 4)
N4_G4_R5 = plan([[[0], [1], [2], [3], []]], 4)
N8_G4_R3 = plan([[[0, 1], [2, 3], []], [[4, 5], [6, 7], []]], 4)


def heatmap(fig):
    return fig.data[0]


def test_format_ids_makes_ranges():
    assert plots.format_ids([]) == "empty"
    assert plots.format_ids([4]) == "4"
    assert plots.format_ids([0, 1]) == "0,1"
    assert plots.format_ids(list(range(32))) == "0–31"
    assert plots.format_ids([0, 1, 2, 7, 9, 10, 11]) == "0–2,7,9–11"
    assert plots.format_ids(list(range(0, 400, 2))).endswith(",…")
    # Cut between runs, never inside one: 19520–19529 must not read "19520–195,…" at 8 replicas.
    assert plots.format_ids(list(range(19520, 19530)), 9) == "19520–…"
    assert plots.format_ids(list(range(19520, 19530)), 6) == "19520…"
    assert plots.format_ids([99700, 99701], 9) == "99700,…"
    assert plots.format_ids([3, 5, 8, 13, 21], 9) == "3,5,8,…"
    for ids in ([964, 3140, 3540, 27, 726], list(range(99700, 99750)), [1, 2, 3, 10, 11, 12]):
        for width in (6, 9, 12):
            label = plots.format_ids(ids, width)
            assert len(label) <= width, (ids, width, label)
            numbers = label.rstrip("…").rstrip(",–").replace("–", ",").split(",")
            assert all(n.isdigit() and int(n) in ids for n in numbers), (ids, width, label)


def test_split_figure_full_then_partial_batch():
    trace = heatmap(plots.split_figure(N6_G4_R2))
    assert [list(r) for r in trace.z] == [[plots.FULL, plots.FULL], [plots.PARTIAL, plots.PARTIAL]]
    assert [list(r) for r in trace.text] == [["0,1", "2,3"], ["4", "5"]]
    assert list(trace.y) == ["step 1", "step 2 (partial 2/4)"]
    assert "cpu:1" in trace.x[1]


def test_split_figure_marks_empty_replica():
    trace = heatmap(plots.split_figure(N4_G4_R5))
    assert list(trace.z[0]) == [plots.FULL] * 4 + [plots.EMPTY]
    assert trace.text[0][4] == "empty"
    trace = heatmap(plots.split_figure(N8_G4_R3))
    assert [list(r) for r in trace.z] == [[plots.FULL, plots.FULL, plots.EMPTY]] * 2


def test_split_figure_shows_first_and_last_steps_of_long_plans():
    steps = [[[2 * s], [2 * s + 1]] for s in range(100)]
    fig = plots.split_figure(plan(steps, 2), max_rows=6)
    assert list(heatmap(fig).y) == ["step 1", "step 2", "step 3", "⋯ step 98", "step 99", "step 100"]
    assert "showing the first 3 and last 3" in fig.layout.title.text


def test_cells_of_many_replicas_keep_their_text_short():
    # Shuffled rows have no runs to shorten: 8 of them in a cell would spill into the next one.
    rows = [[[(r * 7919 + k * 104729) % 60000 for k in range(8)] for r in range(8)]]
    fig = plots.split_figure({**plan(rows, 64), "rows": rows})
    assert max(len(t) for t in heatmap(fig).text[0]) <= 11 and heatmap(fig).text[0][0].endswith(",…")
    assert "8 examples: " in heatmap(fig).customdata[0][0]  # all of them on hover
    assert "1 example: 5" in heatmap(plots.split_figure(plan([[[5], [6]]], 2))).customdata[0][0]


def test_split_summary_says_what_happened():
    text = plots.split_summary(N6_G4_R2)
    assert "6 examples → 2 global batches of 4 on 2 replicas" in text
    assert "Step 2 is partial (2 of 4 examples), split 1/1." in text
    text = plots.split_summary(N8_G4_R3)
    assert "Replica 2 got nothing in steps 1–2." in text
    text = plots.split_summary(plan([[[2 * s], [2 * s + 1], []] for s in range(500)], 2))
    assert "Replica 2 got nothing in steps 1–500." in text and "step 2." not in text
    text = plots.split_summary(plan([[[0, 1], [2, 3]]], 4, notes=["a note from distcore"]))
    assert "Every global batch is full" in text and "- a note from distcore" in text
    # OFF across two workers: each reads every id, so the headline counts 8 deliveries of 4 ids.
    text = plots.split_summary(plan([[[0, 1], [0, 1]], [[2, 3], [2, 3]]], 4))
    assert "8 examples (4 distinct ids: some reached more than one replica) → 2 global batches" in text


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.lists(st.integers(0, 999), max_size=9), min_size=1, max_size=6), min_size=1, max_size=30),
    st.integers(1, 64),
)
def test_split_figure_one_cell_per_step_and_replica(rows, global_batch):
    width = max(len(r) for r in rows)
    steps = [r + [[]] * (width - len(r)) for r in rows]
    fig = plots.split_figure(plan(steps, global_batch), max_rows=12)
    trace = heatmap(fig)
    assert len(trace.z) == min(len(steps), 12)
    assert all(len(row) == width for row in trace.z)
    for row_text, row_z in zip(trace.text, trace.z):
        for text, kind in zip(row_text, row_z):
            assert (text == "empty") == (kind == plots.EMPTY)
    assert isinstance(plots.split_summary(plan(steps, global_batch)), str)


METRICS = [
    {"event": "start", "step": 0, "message": "training", "time": 1.0},
    {"step": 1, "epoch": 1, "loss": 2.3, "examples": 64, "examples_per_sec": 500.0, "time": 2.0},
    {"step": 2, "epoch": 1, "loss": 2.1, "examples": 64, "examples_per_sec": 510.0, "time": 3.0},
    {"event": "checkpoint", "step": 2, "checkpoint": "ckpt-2", "test_loss": 2.0, "test_accuracy": 0.3, "time": 4.0},
    {"event": "resume", "step": 2, "message": "resumed", "time": 5.0},
    {"step": 2, "epoch": 1, "loss": 2.05, "examples": 64, "examples_per_sec": 520.0, "time": 6.0},
    {"step": 3, "epoch": 1, "loss": 1.9, "examples": 64, "examples_per_sec": 520.0, "time": 7.0},
    {
        "epoch": 1,
        "step": 3,
        "train_loss": 2.0,
        "train_accuracy": 0.4,
        "test_loss": 1.8,
        "test_accuracy": 0.5,
        "time": 8.0,
    },
    {
        "epoch": 2,
        "step": 6,
        "train_loss": 1.5,
        "train_accuracy": 0.6,
        "test_loss": 1.4,
        "test_accuracy": 0.62,
        "time": 9.0,
        "lr": 0.001,
    },
]


def test_loss_figure_one_point_per_step_latest_wins():
    trace = plots.loss_figure(METRICS).data[0]
    assert list(trace.x) == [1, 2, 3]
    assert list(trace.y) == [2.3, 2.05, 1.9]


def test_the_loss_plot_of_a_run_with_an_l2_weight_says_the_penalty_is_in_it():
    fig = plots.loss_figure(METRICS, l2=0.01)
    assert fig.layout.title.text == "Training loss per step (+ L2 penalty)"
    assert fig.layout.yaxis.title.text == "loss + L2 penalty"
    assert plots.loss_figure(METRICS).layout.title.text == "Training loss per step"


def test_checkpoints_are_one_trace_however_many_there_are():
    # One add_vline per checkpoint took 38 s for 400 (a checkpoint every step), at every redraw.
    metrics = [{"step": s, "epoch": 1, "loss": 1.0, "examples": 64} for s in range(1, 401)]
    metrics += [{"event": "checkpoint", "checkpoint": f"ckpt-{s}", "step": s} for s in range(1, 401)]
    fig = plots.loss_figure(metrics)
    assert not fig.layout.shapes and [t.name for t in fig.data] == ["training loss", "checkpoint"]
    assert list(fig.data[1].x[:6]) == [1, 1, None, 2, 2, None] and len(fig.data[1].x) == 1200
    assert fig.layout.title.subtitle.text == "dotted lines: checkpoints"  # their key, with no legend
    assert fig.layout.showlegend is False  # the title names the one line; the legend took 40% of a phone
    assert not plots.loss_figure(metrics[:400]).layout.title.subtitle.text  # none: no note


def test_epoch_figure_train_and_test_curves():
    fig = plots.epoch_figure(METRICS)
    by_name = {t.name: t for t in fig.data}
    assert list(by_name["test accuracy"].x) == [1, 2]
    assert list(by_name["test accuracy"].y) == [0.5, 0.62]
    assert list(by_name["train loss"].y) == [2.0, 1.5]


def test_empty_figures_say_so():
    assert "no steps yet" in plots.loss_figure([]).layout.annotations[0].text
    assert "no finished<br>epoch yet" == plots.epoch_figure([]).layout.annotations[-1].text


def test_confusion_figure():
    names = [f"class {i}" for i in range(10)]
    confusion = [[10 if i == j else i for j in range(10)] for i in range(10)]
    trace = plots.confusion_figure(confusion, names).data[0]
    assert [list(r) for r in trace.z] == confusion
    assert list(trace.x) == names and list(trace.y) == names


def test_metrics_csv(tmp_path):
    path = plots.metrics_csv(METRICS, tmp_path / "m.csv")
    rows = list(csv.DictReader(path.open()))
    assert len(rows) == len(METRICS)
    assert [r["kind"] for r in rows[:4]] == ["event", "step", "step", "checkpoint"]
    assert rows[1]["loss"] == "2.3" and rows[-1]["test_accuracy"] == "0.62"
    assert rows[-1]["lr"] == "0.001"  # unknown keys are kept, after the known ones


def test_pieces_of_a_full_batch_that_does_not_divide_are_blue_and_named_in_the_headline():
    # 3 replicas, batch 64, N = 128 under DATA: TensorFlow cuts 22/22/20.
    steps = [[list(range(k, k + 22)), list(range(k + 22, k + 44)), list(range(k + 44, k + 64))] for k in (0, 64)]
    fig = plots.split_figure(plan(steps, 64))
    assert [list(r) for r in heatmap(fig).z] == [[plots.FULL] * 3] * 2
    text = plots.split_summary(plan(steps, 64))
    # The colour key is drawn on the figure, each name beside a square of its cells' colour.
    key = next(a.text for a in fig.layout.annotations if a.name == "legend")
    for colour, what in (("#3b6fc4", "full batch piece"), ("#f5a623", "partial batch piece"), ("#d9d9d9", "empty")):
        assert f"<span style='color:{colour}'>■</span> {what}" in key
    assert "amber = piece of a partial one" in text  # and in words, for text without the figure
    assert "(each full global batch split 22/22/20)" in text and "per-replica batch 21" not in text
    assert "Every global batch is full" in text


def test_headline_of_a_batch_smaller_than_the_replica_count():
    steps = [[[i] for i in range(6)] + [[], []], [[6 + i] for i in range(4)] + [[]] * 4]
    text = plots.split_summary(plan(steps, 6))
    assert "split 1/1/1/1/1/1/0/0" in text and "per-replica batch 0" not in text
    assert "(per-replica batch 2)" in plots.split_summary(N6_G4_R2)
    one = plan([[[0], [1], [2], [3], []]], 4)  # the guide's 4 examples on 5 replicas: one global batch
    assert "→ 1 global batch of 4 on" in plots.split_summary(one)  # not "1 global batches"
    assert plots.split_figure(one).layout.title.text.startswith("1 global batch of 4 over 5 replicas")


def test_empty_figures_have_blank_axes_and_a_note_in_each_panel():
    loss = plots.loss_figure([])
    assert loss.layout.xaxis.showticklabels is False and list(loss.layout.yaxis.range) == [0, 1]
    epochs = plots.epoch_figure([])
    notes = [a for a in epochs.layout.annotations if a.text == "no finished<br>epoch yet"]
    assert sorted(a.xref for a in notes) == ["x domain", "x2 domain"]
    assert epochs.layout.xaxis2.showticklabels is False


def test_titles_sit_below_the_toolbar():
    # A touch (or a hover) shows plotly's toolbar over the top 30 px: on a phone it covered the
    # titles, and Gradio's labels above the plots covered the toolbar (the plots have none now).
    plan = {"steps": [[[0, 1], [2]]], "replicas": 2, "global_batch": 3}
    for fig in (plots.loss_figure(METRICS), plots.epoch_figure(METRICS), plots.split_figure(plan)):
        title = fig.layout.title
        assert title.text and title.yref == "container" and title.pad.t >= 30 and fig.layout.margin.t >= 80


def test_a_long_run_plots_the_mean_of_each_few_steps():
    # 18,760 steps (20 epochs of 60,000 at 64) made each redraw 479 KB, every 2 s per open page.
    metrics = [{"step": s, "epoch": 1, "loss": float(s % 2), "examples": 64} for s in range(1, 4001)]  # 1, 0, ...
    fig = plots.loss_figure(metrics)
    assert list(fig.data[0].x[:2]) == [2, 4] and len(fig.data[0].x) == 2000
    assert set(fig.data[0].y) == {0.5} and fig.layout.title.subtitle.text == "each point: the mean of 2 steps"
    assert list(fig.data[0].customdata[:2]) == [1, 3] and "steps %{customdata:,d}–%{x:,d}" in fig.data[0].hovertemplate
    every = plots.loss_figure(metrics[:2000]).data[0]
    assert len(every.x) == 2000 and every.customdata is None  # up to 2,000 steps: every one, its own hover
    resumed = {"step": 3999, "loss": 1.0, "examples": 64}  # a step trained again after a resume
    fig = plots.loss_figure(metrics[:4001] + [resumed], saved=[2000])
    assert fig.layout.title.subtitle.text == "each point: the mean of 2 steps · dotted lines: checkpoints"


def test_the_split_table_lists_every_steps_ids_the_plot_leaves_out():
    # Every id is in the table: past a cell's first few they are otherwise only in the hover, which a
    # keyboard or a screen reader cannot reach, and steps 7-58 of a 64-step plan are not drawn at all.
    steps = [[[4 * s, 4 * s + 1], [4 * s + 2, 4 * s + 3]] for s in range(20)] + [[[80], []]]
    plan = {"steps": steps, "replicas": 2, "global_batch": 4}
    text = plots.split_summary(plan)
    table = text[text.index("<details>") :]
    assert table.endswith("</details>") and "every step's ids" in table
    assert "| step 10 | 36, 37 | 38, 39 |" in table and "| step 21 (partial 1/4) | 80 | empty |" in table
    assert len(plots.split_figure(plan).data[0].y) == 12  # the plot draws 12 of the 21
    long = plots.split_table({"steps": [[list(range(100))]] * 300, "replicas": 1, "global_batch": 100})
    assert "the first 100 and last 100 steps' ids" in long and "| step 300 | 0–99 |" in long
    assert "| step 101 |" not in long and len(re.findall(r"\| step \d+", long)) == 200


def test_steps_left_out_of_the_picture_are_marked_where_they_were():
    # The gap is marked in place: "step 6" right above "step 95", evenly spaced, needs more than a small subtitle.
    steps = [[[2 * k], [2 * k + 1]] for k in range(100)]
    labels = list(plots.split_figure({"steps": steps, "global_batch": 2, "replicas": 2}).data[0].y)
    assert labels == [f"step {k}" for k in range(1, 7)] + ["⋯ step 95"] + [f"step {k}" for k in range(96, 101)]


GAN_METRICS = [
    {"event": "start", "step": 0, "message": "training", "time": 1.0},
    *(
        {"step": s, "epoch": 1, "d_loss": 0.70 - s / 100, "g_loss": 0.72 - s / 200, "examples": 64, "time": 2.0 + s}
        for s in range(1, 5)
    ),
    {"epoch": 1, "step": 4, "train_d_loss": 0.69, "train_g_loss": 0.71, "test_d_loss": 0.67, "test_g_loss": 0.70},
    {"event": "checkpoint", "step": 4, "checkpoint": "ckpt-4", "test_d_loss": 0.67, "test_g_loss": 0.70, "time": 8.0},
]


def test_a_gans_losses_share_the_step_plot_and_each_has_an_epoch_panel(tmp_path):
    fig = plots.loss_figure(GAN_METRICS)
    assert [t.name for t in fig.data] == ["d_loss", "g_loss", "checkpoint"]
    assert list(fig.data[0].x) == [1, 2, 3, 4] and list(fig.data[1].y) == [0.715, 0.71, 0.705, 0.7]
    assert fig.data[0].line.color != fig.data[1].line.color
    assert fig.layout.title.text == "d_loss and g_loss per step" and fig.layout.yaxis.title.text == "loss"
    assert fig.layout.showlegend is True  # two lines: the legend names them
    epochs = plots.epoch_figure(GAN_METRICS)
    assert [a.text for a in epochs.layout.annotations] == ["d_loss", "g_loss"]  # the panels' titles
    by_name = {t.name: t for t in epochs.data}
    assert list(by_name) == ["train d_loss", "test d_loss", "train g_loss", "test g_loss"]
    assert list(by_name["test g_loss"].y) == [0.70] and by_name["test g_loss"].xaxis == "x2"
    assert epochs.layout.title.text == "d_loss and g_loss per epoch"
    # Before its first epoch ends, a GAN's epoch plot already has its own panels, not the classifier's.
    early = plots.epoch_figure(GAN_METRICS[:5])
    assert [a.text for a in early.layout.annotations][:2] == ["d_loss", "g_loss"]
    assert "no finished<br>epoch yet" == early.layout.annotations[-1].text
    assert plots.epoch_metric_names(METRICS[:3]) == ["loss", "accuracy"]  # a classifier's, as before
    rows = list(csv.DictReader(plots.metrics_csv(GAN_METRICS, tmp_path / "gan.csv").open()))
    assert [r["kind"] for r in rows] == ["event", "step", "step", "step", "step", "epoch", "checkpoint"]
    assert rows[1]["d_loss"] == "0.69" and rows[5]["test_g_loss"] == "0.7" and rows[1]["loss"] == ""


def test_a_classifiers_figures_are_as_they_were():
    fig = plots.loss_figure(METRICS)
    assert [t.name for t in fig.data] == ["training loss", "checkpoint"] and fig.layout.showlegend is False
    assert fig.layout.yaxis.title.text == "loss" and fig.data[0].line.color is None
    epochs = plots.epoch_figure(METRICS[:-1])
    assert [a.text for a in epochs.layout.annotations] == ["Loss", "Accuracy"]
    assert [t.name for t in epochs.data] == ["train loss", "test loss", "train accuracy", "test accuracy"]
    assert epochs.layout.title.text == "Loss and accuracy per epoch"
    empty = plots.epoch_figure([])
    assert [a.text for a in empty.layout.annotations][:2] == ["Loss", "Accuracy"] and len(empty.data) == 4
