"""distcore.verdicts and the buttons' rule (follow.run_actions): plain values, no TensorFlow, no Gradio."""

import json

import pytest

from distcore import follow, runs, verdicts
from distcore.config import DistcoreError, TrainConfig

# loss_check's answer for 4 examples of a batch of 6 on 3 replicas (2 + 2 + 0).
PARTIAL = {
    "global_batch": 6,
    "examples": 4,
    "replicas": 3,
    "per_replica_examples": [2, 2, 0],
    "single_device": 2.4,
    "distributed": 2.40000001,
    "tutorial_fixed_g": 1.6,
    "keras_default": None,
    "keras_default_failure": "InvalidArgumentError: ...",
    "mistake_reduce_mean": 4.8,
    "mistake_keras_mean": 0.8,
}


def test_the_partial_batch_marks_the_tutorials_constant_and_keras_wrong_and_the_distributed_step_right():
    rows = {r["key"]: r for r in verdicts.loss_verdicts(PARTIAL)}
    assert rows["distributed"]["ok"] and rows["distributed"]["verdict"].startswith("right")
    assert not rows["tutorial_fixed_g"]["ok"] and rows["tutorial_fixed_g"]["verdict"] == "wrong: 1.5× too small"
    assert not rows["keras_default"]["ok"] and rows["keras_default"]["verdict"].startswith("fails")
    assert rows["mistake_reduce_mean"]["verdict"] == "wrong: 2× too large"
    assert rows["mistake_keras_mean"]["verdict"] == "wrong: 3× too small"
    assert verdicts.loss_headline(PARTIAL) == (
        "4 examples (a partial batch) cut 2 + 2 + 0 over 3 replicas: 4 of 5 methods miss the single-device loss."
    )


def test_two_evaluations_of_one_checkpoint_stand_side_by_side_with_a_tick_when_equal():
    none = verdicts.evaluation_row({"checkpoint": "ckpt-20", "accuracy": 0.8804, "loss": 0.33}, "r", "none", [])
    three = verdicts.evaluation_row(
        {"checkpoint": "ckpt-20", "accuracy": 0.8804, "loss": 0.33}, "r", "devices", ["cpu:0", "cpu:1", "cpu:2"]
    )
    other = verdicts.evaluation_row({"checkpoint": "ckpt-20", "accuracy": 0.87, "loss": 0.4}, "r", "devices", ["a"])
    rows = verdicts.compare_evaluations([none, three, other])
    assert [(r["devices"], r["same"]) for r in rows] == [(0, True), (3, True), (1, False)]
    assert round(rows[2]["difference"], 2) == -1.04
    assert verdicts.compare_evaluations([three])[0]["same"] is None  # no no-strategy result yet


def test_a_gans_evaluations_compare_by_their_losses_and_the_table_names_them():
    from webapp import evaluate

    result = {"checkpoint": "ckpt-10", "step": 10, "d_loss": 0.6508, "g_loss": 0.6816, "examples": 256, "task": "gan"}
    assert verdicts.measures(result) == {"d_loss": 0.6508, "g_loss": 0.6816}
    none = verdicts.evaluation_row({**result, "grid": "/tmp/grid.png"}, "g", "none", [])
    assert "accuracy" not in none and none["measures"] == {"d_loss": 0.6508, "g_loss": 0.6816}
    # float32 sums in another order: the same within 1e-4, relative; another checkpoint's weights: not.
    three = verdicts.evaluation_row({**result, "d_loss": 0.6508 * (1 + 3e-7)}, "g", "devices", ["a", "b", "c"])
    off = verdicts.evaluation_row({**result, "g_loss": 0.70}, "g", "devices", ["a"])
    rows = verdicts.compare_evaluations([none, three, off])
    assert [r["same"] for r in rows] == [True, True, False] and round(rows[2]["difference"], 4) == 0.0184
    assert evaluate.measured_text(result) == "d_loss 0.6508 · g_loss 0.6816"
    cells = evaluate.table_rows(rows)
    assert cells[0][4:] == [0.6508, 0.6816, "+0.0000", "✓"] and cells[2][-2:] == ["+0.0184", "✗"]
    assert evaluate.table_headers(rows)[4:6] == ["d_loss", "g_loss"]
    # A classifier's row beside a GAN's: both columns named.
    classifier = verdicts.evaluation_row({"checkpoint": "ckpt-5", "accuracy": 0.8, "loss": 0.5}, "c", "none", [])
    mixed = verdicts.compare_evaluations([classifier, none])
    assert evaluate.table_headers(mixed)[4:6] == ["accuracy % / d_loss", "loss / g_loss"]
    assert evaluate.table_headers([]) == evaluate.TABLE_HEADERS
    assert evaluate.table_rows(mixed)[0][4:7] == [80.0, 0.5, "+0.00 pp"]


def test_buttons_follow_the_run():
    record = {"training": True, "state": "running", "has_config": True}
    assert follow.run_actions(record) == {"stop": True, "resume": False, "more": False}
    assert follow.run_actions({**record, "training": False, "state": "stopped"}) == {
        "stop": False,
        "resume": True,
        "more": False,
    }
    assert follow.run_actions({**record, "training": False, "state": "finished"})["more"]
    assert follow.run_actions(None) == {"stop": False, "resume": False, "more": False}
    cfg = TrainConfig(devices=("cpu:0",), global_batch=64, train_examples=640, epochs=1, max_steps=10)
    more = follow.more_epochs_config(cfg)
    assert (more.epochs, more.max_steps) == (2, 20)


def test_train_more_is_for_a_finished_run_only(tmp_path):
    # The page hides the button for a stopped run; its API endpoint refuses it too, not resume it with more epochs.
    run_dir = tmp_path / "r1"
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps(TrainConfig(devices=("cpu:0",), epochs=2).to_dict()))
    runs.write_status(run_dir, {"state": "stopped", "step": 5})
    with pytest.raises(DistcoreError, match="run r1 is stopped, not finished: Train 1 more epoch adds epochs"):
        follow.more_epochs_of(run_dir)
    runs.write_status(run_dir, {"state": "finished", "step": 1876})
    assert follow.more_epochs_of(run_dir).epochs == 3


def test_the_answer_to_start_or_stop_goes_once_the_run_has_ended():
    training = {"training": True, "state": "running", "has_config": True}
    stopped = {**training, "training": False, "state": "stopped"}
    stopping = "Stopping **r1**: it stops at the end of the current loop."
    assert not follow.message_is_stale(stopping, "r1", training)
    assert follow.message_is_stale(stopping, "r1", stopped)
    assert follow.message_is_stale("Started **r1** (process 7) on cpu:0", "r1", {**stopped, "state": "finished"})
    assert not follow.message_is_stale(stopping, "r2", stopped)  # about another run than the one followed
    assert not follow.message_is_stale("Resuming **r1** on cpu:0; 20 steps in all", "r1", stopped)
    assert not follow.message_is_stale("r1 is already training.", "r1", stopped)  # not an answer to Start/Stop
    assert not follow.message_is_stale(stopping, "r1", None)  # no record yet: nothing is known to have ended
    assert not follow.message_is_stale("", "r1", stopped)


def test_a_split_and_a_batch_that_does_not_divide_read_as_one_sentence_with_the_rest_folded():
    from distcore import explain

    plan = {"steps": [[[0, 1], [2, 3]], [[4], [5]]], "global_batch": 4, "replicas": 2, "notes": ["a note"]}
    headline, details = explain.split_notes(plan)
    assert headline == (
        "**6 examples → 2 global batches of 4 on 2 replicas** (per-replica batch 2). "
        "Step 2 is partial (2 of 4 examples), split 1/1."
    )
    assert "- a note" in details and "Cells:" not in details  # the colour key is on the figure
    full = {"steps": [[[0, 1], [2, 3]]], "global_batch": 4, "replicas": 2}
    assert explain.split_notes(full)[0].endswith("Every batch is full; every replica gets a piece.")
    headline, details = explain.batch_note_parts((), 4, 3, [])
    assert headline.count(". ") == 0 and "some may get an empty one at every step" in headline
    assert "2/2/0, or 2/1/1 under FILE and OFF with drop_remainder" in details
    assert explain.batch_note((), 4, 3, []) == f"{headline} {details}"
    assert explain.batch_note_parts((), 64, 2, []) == ("Per-replica batch: **32** (64 / 2 replicas)", "")
