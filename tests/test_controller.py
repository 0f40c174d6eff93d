"""The outer loop: a real epoch learns; stop, resume and checkpoints keep their promises."""

import gc
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from conftest import cpus
from distcore import checkpoints, data, devices, inputs, runs
from distcore.config import DistcoreError, TrainConfig
from distcore.controller import (
    TEST_EXAMPLE_COST,
    Controller,
    StopFlag,
    failure_message,
    guess_test_seconds,
    remaining_test_passes,
    resume_config,
    train_examples,
    worker_scratch,
)
from distcore.loop import StepRunner

REPO = Path(__file__).resolve().parent.parent


def test_one_real_epoch_learns(trained_run):
    run_dir, result = trained_run
    assert result == {"state": "finished", "step": 938, "total_steps": 938}
    records = runs.read_metrics(run_dir)
    steps = [r for r in records if "loss" in r]
    assert [r["step"] for r in steps] == list(range(1, 939))
    assert steps[-1]["examples"] == 60000 - 937 * 64  # the partial last batch: 32
    assert np.mean([r["loss"] for r in steps[-100:]]) < 0.6 * np.mean([r["loss"] for r in steps[:10]])
    epoch = [r for r in records if "test_accuracy" in r and "epoch" in r][0]
    assert epoch["test_accuracy"] > 0.8  # chance is 0.1
    assert 0.7 < epoch["train_accuracy"] < 1 and epoch["train_loss"] > 0
    assert "examples_per_sec" not in steps[0]  # its chunk traced the step: 7-30 examples/s
    assert all(r["examples_per_sec"] > 0 for r in steps[1:])


def test_run_directory_is_a_complete_record(trained_run):
    run_dir, _ = trained_run
    config = runs.read_config(run_dir)
    assert config["tensorflow"] == tf.__version__ and config["devices"] == ["cpu:0", "cpu:1"]
    assert TrainConfig.from_dict(config).global_batch == 64
    assert runs.list_checkpoints(run_dir) == ["ckpt-400", "ckpt-800", "ckpt-938"]
    assert runs.read_status(run_dir)["state"] == "finished"
    assert list((run_dir / "logs").glob("events.out.tfevents.*"))
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        json.loads(line)


def small(**overrides):
    base = dict(
        devices=cpus(2), global_batch=64, epochs=2, seed=5, steps_per_loop=4, train_examples=1000, test_examples=500
    )  # 16 steps per epoch, the last of 40
    return TrainConfig(**{**base, **overrides})


def final_weights(run_dir, config):
    runner = StepRunner(tf.distribute.get_strategy(), config)
    name = runs.list_checkpoints(run_dir)[-1]
    checkpoints.restore(runner.checkpoint(), run_dir / "checkpoints" / name)
    return [v.numpy() for v in runner.model.trainable_variables]


def epoch_records(run_dir):
    return [r for r in runs.read_metrics(run_dir) if "train_loss" in r]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """small() trained in one go: what every stopped-and-resumed run must end up equal to."""
    run_dir = tmp_path_factory.mktemp("whole") / "whole"
    assert Controller(small(), run_dir).run()["step"] == 32
    return run_dir


def assert_same_run(reference, run_dir):
    """Same final weights and the same epoch records, each epoch once."""
    for a, b in zip(final_weights(reference, small()), final_weights(run_dir, small())):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    whole_epochs, part_epochs = epoch_records(reference), epoch_records(run_dir)
    assert [(r["epoch"], r["step"]) for r in part_epochs] == [(1, 16), (2, 32)]
    for a, b in zip(whole_epochs, part_epochs):
        for key in ("train_loss", "train_accuracy", "test_loss", "test_accuracy"):
            assert a[key] == pytest.approx(b[key], rel=1e-4)


def step_losses(run_dir):
    return [r["loss"] for r in runs.read_metrics(run_dir) if "loss" in r]


def test_two_trainings_in_two_threads_each_follow_their_own_seed(tmp_path, uninterrupted):
    # The global seeds are the process's, yet each run is built and shuffled with its own, not
    # the other's (losses up to 0.45 from the same run alone). The second epoch's shuffle too.
    configs = {"a": small(), "b": small(seed=11, devices=cpus(2)[::-1])}
    Controller(configs["b"], tmp_path / "b-alone").run()
    results = {}

    def train(name):
        try:
            results[name] = Controller(configs[name], tmp_path / name).run()["state"]
        except BaseException as err:  # for the assertion below, in this thread
            results[name] = repr(err)

    threads = [threading.Thread(target=train, args=(name,), daemon=True) for name in configs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)  # (daemons: a hang fails this test, not the whole suite)
    assert results == {"a": "finished", "b": "finished"}
    assert step_losses(tmp_path / "a") == step_losses(uninterrupted)
    assert step_losses(tmp_path / "b") == step_losses(tmp_path / "b-alone")


def test_used_iterators_are_deleted_off_the_training_thread(tmp_path, dropped_iterators):
    # Deleting a used iterator can take TensorFlow up to a minute (inputs.drop_later): each
    # epoch's and each test pass's iterator must be deleted on a thread of its own.
    assert Controller(small(), tmp_path / "r").run()["state"] == "finished"
    assert dropped_iterators() == ["distcore-drop-iterator"] * 4  # 2 epochs, each with a test pass


def test_stopped_and_resumed_run_matches_an_uninterrupted_one(tmp_path, uninterrupted):

    stop = StopFlag()
    stop_after_10 = lambda record: record.get("step") == 10 and "loss" in record and stop.set()  # noqa: E731
    part = Controller(small(checkpoint_every=0), tmp_path / "part", stop=stop, on_record=stop_after_10).run()
    assert part["state"] == "stopped" and part["step"] in (12,)  # stops at the chunk boundary
    assert runs.list_checkpoints(tmp_path / "part") == ["ckpt-12"]  # saved on stop

    resumed = Controller(resume_config(tmp_path / "part"), tmp_path / "part", resume=True).run()
    assert resumed == {"state": "finished", "step": 32, "total_steps": 32}
    assert_same_run(uninterrupted, tmp_path / "part")
    events = [r["event"] for r in runs.read_metrics(tmp_path / "part") if "event" in r]
    assert events[:2] == ["start", "checkpoint"] and "stopped" in events and "resume" in events


def test_resume_from_a_checkpoint_on_the_epochs_last_step_trains_the_next_epoch(tmp_path, uninterrupted):
    # checkpoint_every 16 = the epoch's step count: the interval's checkpoint falls on the
    # epoch's last step and must hold the closed epoch, or the resume trains nothing.
    run_dir = tmp_path / "r"
    first = Controller(small(epochs=1, checkpoint_every=16), run_dir).run()
    assert first == {"state": "finished", "step": 16, "total_steps": 16}
    assert runs.list_checkpoints(run_dir) == ["ckpt-16"]
    resumed = Controller(resume_config(run_dir, {"epochs": 2}), run_dir, resume=True).run()
    assert resumed == {"state": "finished", "step": 32, "total_steps": 32}
    assert [r["step"] for r in runs.read_metrics(run_dir) if "loss" in r] == list(range(1, 33))
    assert_same_run(uninterrupted, run_dir)


def test_a_checkpoint_saved_before_its_epoch_was_closed_still_resumes(tmp_path, uninterrupted):
    # What older distcore left with checkpoint_every on the epoch's last step: ckpt-16 saved
    # before the epoch was closed, then the epoch's record, with no checkpoint of its own.
    run_dir = tmp_path / "r"
    old = Controller(small(epochs=1), run_dir)
    dist = inputs.distribute(
        old.strategy,
        train_examples(old.config, old.data, 0, 0),
        global_batch=64,
        api="dataset",
        policy="auto",
        drop_remainder=False,
    )
    old.runner.train_steps(iter(dist), tf.constant(16))
    old.save_checkpoint(16)
    old.end_epoch(1, 16)
    old.metrics.close()
    old.close()  # never run: let go of the run, as run() does at its end
    assert runs.list_checkpoints(run_dir) == ["ckpt-16"] and len(epoch_records(run_dir)) == 1
    resumed = Controller(resume_config(run_dir, {"epochs": 2}), run_dir, resume=True).run()
    assert resumed == {"state": "finished", "step": 32, "total_steps": 32}
    assert_same_run(uninterrupted, run_dir)


def test_resume_can_extend_but_not_change_the_model(tmp_path):
    Controller(small(epochs=1, max_steps=4), tmp_path / "r").run()
    with pytest.raises(DistcoreError, match=r"model 'cnn' -> 'mlp'.*start a new run"):
        resume_config(tmp_path / "r", {"model": "mlp"})
    # A changed API with other devices is refused for the change, which no resume may make, not
    # for the mix ("must divide evenly by the number of replicas (3)").
    with pytest.raises(DistcoreError, match=r"api 'dataset' -> 'function'"):
        resume_config(tmp_path / "r", {"api": "function", "global_batch": "64", "devices": cpus(3)})
    # A library caller who skips resume_config is refused the same: a batch of 32 resumed "4 batches"
    # into an epoch of 64s, and config.json took the new values.
    before = (tmp_path / "r" / "config.json").read_text()
    with pytest.raises(DistcoreError, match=r"learning_rate 0.001 -> 0.5, global_batch 64 -> 32"):
        Controller(small(epochs=1, max_steps=8, global_batch=32, learning_rate=0.5), tmp_path / "r", resume=True)
    assert (tmp_path / "r" / "config.json").read_text() == before
    longer = resume_config(tmp_path / "r", {"max_steps": 8, "devices": cpus(3)})
    # One process trains a run at a time (RUN/.lock): a second Controller is refused until the first lets go.
    first = Controller(longer, tmp_path / "r", resume=True)
    with pytest.raises(DistcoreError, match=r"is held by another Controller in this process: run\(\) it, or close\(\)"):
        Controller(longer, tmp_path / "r", resume=True)
    # A resume on a device count the run's function-API batch cannot divide names the counts that can.
    function_run = tmp_path / "f"
    Controller(small(epochs=1, max_steps=1, api="function", global_batch=63, devices=cpus(1)), function_run).run()
    with pytest.raises(
        DistcoreError,
        match=r"cannot resume on 2 replicas: the run's global batch \(63\) stays as "
        r"it is.*replica count of 1, 3, 7, 9, 21 or 63\.$",
    ):
        resume_config(function_run, {"devices": cpus(2)})
    result = first.run()
    assert result["step"] == 8
    assert runs.read_config(tmp_path / "r")["devices"] == list(cpus(3))
    new = Controller(small(epochs=1), tmp_path / "new")  # two new runs: both could pass check_new at once
    with pytest.raises(DistcoreError, match="is held by another Controller in this process"):
        Controller(small(epochs=1), tmp_path / "new")
    new.close()


def test_a_closed_controller_is_refused_and_leaves_its_run_as_a_stopped_set_up_does(tmp_path):
    # run() after close() is refused (unlocked, it would train beside a CLI resume of the same
    # run), a second run() too (not "ValueError: I/O operation on closed file."), and a Controller
    # closed unrun leaves its run stopped, its name free, not "starting" (read as died).
    never = Controller(small(epochs=1), tmp_path / "never")
    never.close()
    with pytest.raises(
        DistcoreError,
        match=r"has let go of .*never \(it ran, or close\(\) was called\): to train "
        r"the run, make a new one: .* or Controller\(config, run_dir\) if it never "
        r"trained\.$",
    ):
        never.run()
    assert runs.read_status(tmp_path / "never")["state"] == "stopped"
    assert not (tmp_path / "never" / "config.json").exists()
    again = Controller(small(epochs=1, max_steps=2), tmp_path / "never")  # the name is free again
    assert again.run()["state"] == "finished"
    with pytest.raises(DistcoreError, match="has let go of"):
        again.run()
    assert runs.read_status(tmp_path / "never")["state"] == "finished"
    before = runs.read_status(tmp_path / "never")
    config_before = (tmp_path / "never" / "config.json").read_text()
    with Controller(resume_config(tmp_path / "never", {"max_steps": 4}), tmp_path / "never", resume=True):
        assert runs.read_status(tmp_path / "never")["state"] == "starting"
    # A resume closed unrun leaves the run as it was (not "stopped before training began"), its
    # config.json too (not max_steps 4, on which a plain resume would train on).
    assert runs.read_status(tmp_path / "never") == before and runs.list_checkpoints(tmp_path / "never") == ["ckpt-2"]
    assert (tmp_path / "never" / "config.json").read_text() == config_before
    with pytest.raises(DistcoreError, match="already finished at step 2 of 2"):  # not trained on
        resume_config(tmp_path / "never")

    # Interrupted while it sets up (a notebook's Ctrl-C): as it was too (not "stopped before
    # training began" at step 2 of 4, beside a config.json of max_steps 4).
    def interrupted(*_):
        raise KeyboardInterrupt

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Controller, "restore", interrupted)
        with pytest.raises(KeyboardInterrupt):
            Controller(resume_config(tmp_path / "never", {"max_steps": 4}), tmp_path / "never", resume=True)
    assert runs.read_status(tmp_path / "never") == before
    assert (tmp_path / "never" / "config.json").read_text() == config_before
    dropped = Controller(small(epochs=1), tmp_path / "dropped")
    del dropped  # as a notebook's next cell drops it: as close() leaves it (not "died" with its name taken)
    gc.collect()
    assert runs.read_status(tmp_path / "dropped")["state"] == "stopped"
    assert Controller(small(epochs=1, max_steps=2), tmp_path / "dropped").run()["state"] == "finished"
    assert (
        Controller(resume_config(tmp_path / "never", {"max_steps": 4}), tmp_path / "never", resume=True).run()["step"]
        == 4
    )


def test_ctrl_c_in_a_library_caller_stops_with_a_checkpoint(tmp_path):
    # Not KeyboardInterrupt in the loop, which would fail the run and lose its steps since the last checkpoint.
    script = (
        "import sys; from distcore.config import TrainConfig; from distcore.controller import Controller; "
        "print(Controller(TrainConfig(devices=('cpu:0',), epochs=50, train_examples=1000, test_examples=100, "
        "steps_per_loop=4), sys.argv[1]).run(), flush=True)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path / "lib")],
        cwd=REPO,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 120
    while runs.last_logged_step(tmp_path / "lib") < 8 and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-2000:]
    assert "Stopping at the end of this loop, with a checkpoint" in err
    status = runs.read_status(tmp_path / "lib")
    assert status["state"] == "stopped" and f"'step': {status['step']}" in out and status["step"] >= 8
    assert runs.list_checkpoints(tmp_path / "lib") == [f"ckpt-{status['step']}"]


def test_a_second_ctrl_c_reads_stopped_with_what_was_lost_and_an_on_record_error_still_ends_the_run(tmp_path):
    # A notebook's second Ctrl-C (KeyboardInterrupt in run()) marks the run "stopped", not "failed",
    # "KeyboardInterrupt"; a callback that raises again on the "failed" record does not leave it "running".
    def interrupt_at_step_10(record):
        if record.get("step") == 10 and "loss" in record:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Controller(small(checkpoint_every=4), tmp_path / "ctrl-c", on_record=interrupt_at_step_10).run()
    status = runs.read_status(tmp_path / "ctrl-c")
    said = "interrupted at step 12 (a second Ctrl-C), with no checkpoint there: a resume continues from ckpt-8"
    assert (status["state"], status["message"]) == ("stopped", said)
    assert runs.read_metrics(tmp_path / "ctrl-c")[-1] == {
        **runs.read_metrics(tmp_path / "ctrl-c")[-1],
        "event": "stopped",
        "message": said,
    }

    def always_fails(record):
        return record["loss"]  # a KeyError on every event record, the "failed" one too

    with pytest.raises(KeyError):
        Controller(small(), tmp_path / "callback", on_record=always_fails).run()
    assert runs.read_status(tmp_path / "callback")["state"] == "failed"
    for bad, message in (
        ({"on_record": 5}, "on_record must be a function"),
        ({"stop": True}, "stop must be a StopFlag"),
    ):
        with pytest.raises(DistcoreError, match=message):
            Controller(small(), tmp_path / "bad", **bad)
    with pytest.raises(DistcoreError, match="config must be a TrainConfig, not dict"):
        Controller(small().to_dict(), tmp_path / "bad")
    with pytest.raises(DistcoreError, match=r"the run directory \(5\) must be a path"):
        Controller(small(), 5)
    assert not (tmp_path / "bad").exists()


def test_a_run_that_failed_before_its_first_checkpoint_resumes_from_step_0(tmp_path, uninterrupted):
    def fail_at_step_10(record):
        if record.get("step") == 10 and "loss" in record:
            raise OSError("the disk went away")

    run_dir = tmp_path / "r"
    with pytest.raises(OSError):
        Controller(small(), run_dir, on_record=fail_at_step_10).run()
    assert runs.read_status(run_dir)["state"] == "failed" and runs.list_checkpoints(run_dir) == []
    assert runs.last_logged_step(run_dir) == 10

    resumed = Controller(resume_config(run_dir), run_dir, resume=True).run()
    assert resumed == {"state": "finished", "step": 32, "total_steps": 32}
    assert [r["step"] for r in runs.read_metrics(run_dir) if "loss" in r] == list(range(1, 33))
    assert_same_run(uninterrupted, run_dir)
    said = [r for r in runs.read_metrics(run_dir) if r.get("event") == "resume"]
    assert said[0]["step"] == 0 and "no checkpoint to resume from" in said[0]["message"]

    # Checkpoints that were saved and are gone are a loss to report, not a reason to start over.
    for path in (run_dir / "checkpoints").iterdir():
        path.unlink()
    with pytest.raises(DistcoreError, match="holds no checkpoint to restore"):
        Controller(resume_config(run_dir, {"epochs": 3}), run_dir, resume=True)


def test_a_failure_message_gives_tensorflows_reason_not_its_stack():
    @tf.function
    def check(x):
        tf.debugging.assert_non_negative(x, message="the loss went negative")
        return x

    with pytest.raises(tf.errors.InvalidArgumentError) as raised:
        check(tf.constant(-1.0))
    assert str(raised.value).startswith("Graph execution error:")  # what a collective's failure looks like too
    message = failure_message(raised.value)
    assert message.startswith("InvalidArgumentError: ") and "the loss went negative" in message
    assert "\n" not in message and "File " not in message
    assert failure_message(DistcoreError("said for people")) == "said for people"
    # A task's step whose Keras model is given examples of another shape: autograph's "in user code"
    # and the code's stack, then Keras's heading; the line is Keras's reason.
    import keras

    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])

    def step(x):
        return model(x)

    with pytest.raises(ValueError) as raised:
        tf.function(step)(tf.zeros([2, 28, 28, 1]))
    assert str(raised.value).startswith("in user code:") and "Exception encountered when calling" in str(raised.value)
    reason = failure_message(raised.value)
    assert reason.startswith("ValueError: Invalid input shape for input") and "Expected shape (None, 8)" in reason
    assert "\n" not in reason and "\x1b" not in reason
    heading = "Exception encountered when calling Sequential.call().\n\n\x1b[1mInvalid input shape\x1b[0m\n\nArguments"
    assert failure_message(ValueError(heading)) == "ValueError: Invalid input shape"
    user = 'in user code:\n\n    File "/home/me/mytask.py", line 12, in train_step  *\n        y = f(x)\n\n'
    assert failure_message(ValueError(user + "    TypeError: bad operand\n")) == "TypeError: bad operand"
    assert failure_message(OSError("the disk went away")) == "OSError: the disk went away"
    # TensorFlow's internal node name before the reason is left out; status.json's detail keeps it.
    node = (
        "{{function_node __wrapped__CollectiveReduceV2_Nordering_token_1_device_/job:worker/replica:0/task:0/"
        "device:CPU:0}} Collective ops is aborted by: Error reported from /job:worker/task:1: The following "
        "tasks are unhealthy (stopped sending heartbeats):\n/job:worker/replica:0/task:1\nThe tasks have "
        "crashed. [Op:CollectiveReduceV2] name: "
    )  # (TensorFlow 2.21's text, shortened)
    assert failure_message(tf.errors.UnavailableError(None, None, node)) == (
        "UnavailableError: Collective ops is aborted by: Error reported from /job:worker/task:1: The following "
        "tasks are unhealthy (stopped sending heartbeats)"
    )
    assert failure_message(
        tf.errors.InternalError(
            None, None, "{{function_node __inference_<lambda>_105}} Collective ops is aborted by: joining a group"
        )
    ) == ("InternalError: Collective ops is aborted by: joining a group")


def test_a_resume_with_nothing_left_to_train_is_refused(uninterrupted):
    before = (uninterrupted / "config.json").read_text()
    for same in ({}, {"epochs": 2}, {"steps_per_loop": 8}):
        with pytest.raises(
            DistcoreError,
            match=r"run whole already finished at step 32 of 32: its 2 epochs end there; raise epochs to train",
        ):
            resume_config(uninterrupted, same)
    with pytest.raises(
        DistcoreError,
        match=r"epochs 1 .*16 steps.*already trained 32 \(ckpt-32\).*epochs of at "
        r"least 3, and max steps 0 \(no limit\) or more than 32",
    ):
        resume_config(uninterrupted, {"epochs": 1})
    with pytest.raises(DistcoreError, match=r"max steps 20: that makes 20 steps.*already trained 32"):
        resume_config(uninterrupted, {"max_steps": 20})
    assert resume_config(uninterrupted, {"epochs": 3}).total_steps() == 48
    assert (uninterrupted / "config.json").read_text() == before
    # A library caller's Controller checks it too (not "finished at step 32 of 16", config.json rewritten).
    status = runs.read_status(uninterrupted)
    for fewer in ({"epochs": 1}, {"max_steps": 20}):
        with pytest.raises(DistcoreError, match="already trained 32"):
            Controller(small(**fewer), uninterrupted, resume=True)
    assert (uninterrupted / "config.json").read_text() == before and runs.read_status(uninterrupted) == status


def test_a_set_up_that_fails_or_is_interrupted_leaves_the_run_as_a_retry_needs_it(tmp_path, monkeypatch):
    # Ctrl-C in a notebook while a Controller sets up leaves no config.json, lock or "starting"
    # status, so the next try does not find the folder "already holds a run".
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr(Controller, "set_up", interrupted)
        with pytest.raises(KeyboardInterrupt):
            Controller(small(), tmp_path / "r")
    assert not (tmp_path / "r" / "config.json").exists()
    assert runs.read_status(tmp_path / "r")["state"] == "stopped"
    with monkeypatch.context() as patched:
        patched.setattr(tf, "executing_eagerly", lambda: False)  # tf.compat.v1.disable_eager_execution()
        with pytest.raises(DistcoreError, match="needs TensorFlow's eager execution"):
            Controller(small(), tmp_path / "r")
    assert Controller(small(epochs=1, max_steps=2), tmp_path / "r").run()["state"] == "finished"


def test_a_stop_at_the_start_event_waits_for_the_loop(tmp_path):
    # A stop between the start event and the loop waits for the loop: a "start", then an end.
    class Flag(StopFlag):
        def exit_before_training(self):
            raise AssertionError("ended the process with the start logged and no end")

    flag = Flag(tmp_path / "r")
    at_start = lambda record: record.get("event") == "start" and flag.on_signal(signal.SIGTERM, None)  # noqa: E731
    assert Controller(small(), tmp_path / "r", stop=flag, on_record=at_start).run()["state"] == "stopped"
    assert [r["event"] for r in runs.read_metrics(tmp_path / "r") if "event" in r] == ["start", "stopped"]


def test_a_controller_dropped_without_running_lets_go_of_its_run(tmp_path):
    # A notebook cell run again takes the name of a Controller never run; its run does not stay
    # locked ("held by another Controller in this process") for the kernel's life.
    trainer = Controller(small(epochs=1, max_steps=2), tmp_path / "r")
    del trainer
    gc.collect()  # the same cell, run again, starts it (nothing was trained: the name is free again)
    assert Controller(small(epochs=1, max_steps=2), tmp_path / "r").run()["step"] == 2


def test_a_used_run_directory_is_not_overwritten(tmp_path):
    Controller(small(epochs=1, max_steps=2), tmp_path / "r").run()
    with pytest.raises(DistcoreError, match="already holds a run"):
        Controller(small(), tmp_path / "r")
    with pytest.raises(DistcoreError, match="no config.json"):
        Controller(small(), tmp_path / "empty", resume=True)


def test_resume_falls_back_past_a_damaged_newest_checkpoint(tmp_path):
    run_dir = tmp_path / "r"
    Controller(small(epochs=1, max_steps=8, checkpoint_every=4), run_dir).run()
    assert runs.list_checkpoints(run_dir) == ["ckpt-4", "ckpt-8"]
    data_file = next((run_dir / "checkpoints").glob("ckpt-8.data-*"))
    data_file.write_bytes(data_file.read_bytes()[:100])  # truncated
    controller = Controller(resume_config(run_dir, {"max_steps": 10}), run_dir, resume=True)
    assert controller.resumed_from == "ckpt-4" and int(controller.runner.step.numpy()) == 4
    fallback = [r for r in runs.read_metrics(run_dir) if r.get("event") == "fallback"]
    assert "ckpt-8" in fallback[0]["message"]


def test_a_checkpoint_saved_but_never_logged_is_tested_when_resumed_from(tmp_path):
    # A SIGKILL between a checkpoint's save and its log record: the resume tests and logs it.
    run_dir = tmp_path / "r"
    Controller(small(epochs=1, max_steps=8, checkpoint_every=4), run_dir).run()
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    logged = [json.loads(line) for line in lines if '"checkpoint": "ckpt-8"' in line]
    assert len(logged) == 1
    (run_dir / "metrics.jsonl").write_text(
        "".join(
            line + "\n" for line in lines if '"checkpoint": "ckpt-8"' not in line and '"event": "finished"' not in line
        )
    )
    Controller(resume_config(run_dir, {"max_steps": 12}), run_dir, resume=True).run()
    tested = [r for r in runs.read_metrics(run_dir) if r.get("checkpoint") == "ckpt-8"]
    assert [r["message"] for r in tested] == ["ckpt-8, tested now: its process ended before it logged it"]
    assert (tested[0]["test_loss"], tested[0]["test_accuracy"]) == pytest.approx(
        (logged[0]["test_loss"], logged[0]["test_accuracy"]), rel=1e-6
    )
    events = [r.get("event") for r in runs.read_metrics(run_dir) if "event" in r]
    assert events.count("checkpoint") == 3  # ckpt-4, ckpt-8 now, ckpt-12: a logged one is not tested again


def test_file_policy_trains_from_tfrecord_shards(tmp_path, monkeypatch):
    monkeypatch.setenv("DISTCORE_CACHE_DIR", str(tmp_path / "cache"))
    result = Controller(small(epochs=1, policy="file", max_steps=6), tmp_path / "r").run()
    assert result["step"] == 6
    assert len(list((tmp_path / "cache").glob("*/part-*.tfrecord"))) == 8


def test_a_workers_scratch_folder_replaces_those_of_dead_workers(tmp_path, monkeypatch):
    # A bare `train --multi-worker` killed with SIGKILL cannot remove its own folder.
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    gone = subprocess.Popen(["true"])
    gone.wait()
    dead = tmp_path / f"distcore-worker-{gone.pid}-abc"
    (dead / "checkpoints").mkdir(parents=True)
    live = tmp_path / f"distcore-worker-{os.getppid()}-def"
    live.mkdir()
    other = tmp_path / "distcore-workers-xyz"  # a cluster launcher's folder: not this function's
    other.mkdir()
    new = worker_scratch()
    assert new.parent == tmp_path and new.name.startswith(f"distcore-worker-{os.getpid()}-")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([new.name, live.name, other.name])


def test_the_chunk_that_traced_reports_no_speed_or_eta(tmp_path, monkeypatch):
    # A process's first chunk is one step that also traces the step function: its time per
    # step says nothing about the rest (after a resume it would show an ETA of minutes for seconds).
    statuses = []
    set_status = Controller.set_status
    monkeypatch.setattr(
        Controller,
        "set_status",
        lambda self, state, **extra: statuses.append((state, extra)) or set_status(self, state, **extra),
    )
    config = TrainConfig(devices=cpus(2), epochs=1, train_examples=640, test_examples=200, steps_per_loop=5)
    Controller(config, tmp_path / "r").run()
    chunks = [extra for state, extra in statuses if state == "running" and "eta_seconds" in extra]
    assert chunks[0]["examples_per_sec"] is None and chunks[0]["eta_seconds"] is None
    assert all(c["examples_per_sec"] > 0 and c["eta_seconds"] >= 0 for c in chunks[1:]) and len(chunks) == 3
    steps = [r for r in runs.read_metrics(tmp_path / "r") if "loss" in r]
    assert "examples_per_sec" not in steps[0] and all(r["examples_per_sec"] > 0 for r in steps[1:])


def test_an_epochs_first_chunk_is_not_timed_and_the_status_keeps_the_last_speed(tmp_path, monkeypatch):
    # An epoch's first chunk starts its iterator (a shuffle of the whole epoch), often in a few
    # steps to the next loop boundary: timed, 44-800 examples/s among ~5,000, an ETA of 5 min for 55 s.
    statuses = []
    set_status = Controller.set_status
    monkeypatch.setattr(
        Controller,
        "set_status",
        lambda self, state, **extra: (
            statuses.append((int(self.runner.step.numpy()), extra.get("examples_per_sec"), extra.get("eta_seconds")))
            or set_status(self, state, **extra)
        ),
    )
    config = TrainConfig(devices=cpus(2), epochs=2, train_examples=640, test_examples=200, steps_per_loop=4)
    Controller(config, tmp_path / "r").run()  # chunks end at steps 1, 4, 8, 10 | 12, 16, 20
    steps = {r["step"]: r for r in runs.read_metrics(tmp_path / "r") if "loss" in r}
    assert [s for s, r in steps.items() if "examples_per_sec" not in r] == [1, 11, 12]
    chunk = {step: (speed, eta) for step, speed, eta in statuses if speed is not None or eta is not None}
    assert set(chunk) == {4, 8, 10, 12, 16, 20}
    assert chunk[12][0] == chunk[10][0]  # the last timed chunk's speed, not the new iterator's start
    assert chunk[12][1] > 0


def test_the_eta_counts_the_test_passes_still_to_come(tmp_path, monkeypatch):
    # The ETA counts the test passes too, one at every checkpoint and epoch end: counting
    # training steps only, an ETA of 0.55 s comes true 8.7 s later.
    config = TrainConfig(devices=cpus(1), epochs=2, train_examples=640, checkpoint_every=4)  # 10 steps an epoch
    assert remaining_test_passes(config, 0, 20) == 6  # steps 4, 8, 10, 12, 16, 20
    assert remaining_test_passes(config, 10, 20) == 3 and remaining_test_passes(config, 20, 20) == 0
    assert remaining_test_passes(config.replace(checkpoint_every=0), 0, 20) == 2  # the epoch ends
    assert remaining_test_passes(config.replace(max_steps=7), 0, 7) == 2  # 4, and the last step
    statuses = []
    set_status = Controller.set_status
    monkeypatch.setattr(
        Controller,
        "set_status",
        lambda self, state, **extra: (
            statuses.append(
                (self.runner.step.numpy(), extra.get("eta_seconds"), self.test_seconds, extra.get("examples_per_sec"))
            )
            or set_status(self, state, **extra)
        ),
    )
    Controller(config.replace(test_examples=2000, steps_per_loop=2), tmp_path / "r").run()
    # The first pass (step 4) traced the test step, and its time is not counted.
    assert {t for step, _, t, _ in statuses if 4 < step <= 8} == {None}
    eta, test_seconds = next((eta, t) for step, eta, t, _ in statuses if step == 12 and eta is not None)
    assert test_seconds > 0 and eta > 2 * test_seconds  # after step 12: the passes at 16 and 20, and 8 steps
    # Before the process has timed a pass (a new run before its first checkpoint, or just after
    # a resume), a pass is guessed from the training speed: it counted 0 and said 1 s for 8.
    eta, test_seconds, speed = next((eta, t, v) for step, eta, t, v in statuses if step == 2 and eta is not None)
    step_seconds = 64 / speed  # full batches of 64
    assert test_seconds is None and guess_test_seconds(config.replace(test_examples=2000), step_seconds) == (
        pytest.approx(2000 / 64 * step_seconds * TEST_EXAMPLE_COST)
    )
    assert eta == pytest.approx(
        18 * step_seconds + 6 * 2000 / 64 * step_seconds * TEST_EXAMPLE_COST
    )  # 18 steps, 6 passes


def test_a_mistyped_data_dir_leaves_no_run_behind(tmp_path):
    # `train --data-dir /nonexistent` is refused and leaves no config.json, so the corrected
    # command is not refused as "already holds a run".
    config = TrainConfig(devices=cpus(1), train_examples=128, test_examples=64, max_steps=1)
    with pytest.raises(DistcoreError, match="lacks train-images"):
        Controller(config.replace(data_dir=str(tmp_path / "no-such-folder")), tmp_path / "run")
    assert not (tmp_path / "run" / "config.json").exists()
    assert Controller(config, tmp_path / "run").run()["state"] == "finished"


def test_a_relative_data_dir_resumes_from_anywhere_and_a_missing_one_falls_back_with_a_note(
    tmp_path, monkeypatch, fmnist
):
    # config.json holds --data-dir dcopy as an absolute path, so --resume and evaluate from another
    # folder find it (not "--data-dir dcopy lacks ...", a flag the user never passed). A folder
    # that is gone (a run copied from another machine) can still be evaluated or resumed in the
    # app, which has no data folder field: the usual places are searched, and the run says so.
    copy = tmp_path / "dcopy"
    copy.mkdir()
    for name in data.FILES.values():
        (copy / name).symlink_to(Path(fmnist.source) / name)
    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "r"
    Controller(small(epochs=1, max_steps=2, data_dir="dcopy"), run_dir).run()
    assert runs.read_config(run_dir)["data_dir"] == str(copy)
    monkeypatch.chdir(run_dir)  # another folder
    assert Controller(resume_config(run_dir, {"max_steps": 4}), run_dir, resume=True).run()["step"] == 4
    shutil.rmtree(copy)
    monkeypatch.delenv("DISTCORE_DATA_DIR", raising=False)
    expected = (
        f"the run's data folder {copy} (its data_dir in {run_dir / 'config.json'}) lacks "
        f"{', '.join(data.FILES.values())}; read Fashion-MNIST from {data.locate()} instead."
    )
    assert Controller(resume_config(run_dir, {"max_steps": 6}), run_dir, resume=True).run()["step"] == 6
    assert [r["message"] for r in runs.read_metrics(run_dir) if r.get("event") == "fallback"] == [expected]
    evaluated = checkpoints.evaluate(run_dir, None)
    assert evaluated["note"] == expected and evaluated["data_dir"] == str(data.locate()) and evaluated["step"] == 6
    with pytest.raises(
        DistcoreError, match=f"^--data-dir \\(data_dir=\\) {tmp_path / 'elsewhere'} lacks"
    ):  # a flag given
        Controller(resume_config(run_dir, {"max_steps": 8, "data_dir": "../elsewhere"}), run_dir, resume=True)


def test_a_logs_folder_that_cannot_be_written_is_a_clear_error(tmp_path):
    # A DistcoreError, not a PermissionDeniedError / FailedPreconditionError traceback from CreateSummaryFileWriter.
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    (run_dir / "logs").write_text("a file where TensorBoard's folder goes")
    with pytest.raises(DistcoreError) as caught:
        Controller(small(max_steps=1), run_dir)
    assert str(caught.value) == f"cannot write TensorBoard logs in {run_dir / 'logs'}: Not a directory."


def test_a_run_whose_threads_differ_from_a_new_processs_is_warned_of(tmp_path):
    # A notebook's runs on other replica counts keep the first one's threads per op, and their
    # losses leave the CLI's from step 5: a warning says so.
    if "TF_NUM_INTRAOP_THREADS" in os.environ:
        pytest.skip("the variable sets the threads of every process alike")
    have = devices.intra_op_setting()
    other = next((r for r in (1, 2, 3, 4) if devices.intra_op_threads(r) != have), None)
    if other is None:
        pytest.skip("every replica count gets this process's thread count here")
    with pytest.warns(UserWarning, match=f"a new process for {other} replica"):
        Controller(small(devices=cpus(other)), tmp_path / "r").close()
