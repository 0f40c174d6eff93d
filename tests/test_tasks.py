"""Tasks: a user's Keras model on their arrays, the guide's GAN, and a user's own step, each with
the guarantees of the tutorial classifier: equal first steps on any device set, exact resume,
evaluation on any device set, export."""

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

import distcore
from conftest import ROOT, cpus
from distcore import checkpoints, runs, tasks


def make_model():
    return keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(3)])


def arrays(n=480, m=120, seed=0):
    """Three classes set by the signs of two features: a model can learn them."""
    rng = np.random.default_rng(seed)
    x, xt = rng.normal(size=(n, 8)).astype("float32"), rng.normal(size=(m, 8)).astype("float32")
    label = lambda v: (v[:, 0] > 0).astype(int) + (v[:, 1] > 0)  # noqa: E731
    return distcore.Arrays(x, label(x), xt, label(xt))


def step_records(run):
    return [r for r in run.records if runs.is_step_record(r)]


def test_a_users_model_on_their_arrays_takes_the_same_first_step_on_1_2_and_4_replicas(tmp_path):
    data = arrays()
    first = {}
    for r in (1, 2, 4):
        run = distcore.train(
            distcore.Classifier(make_model), data, tmp_path / f"r{r}", devices=r, global_batch=32, max_steps=1, seed=1
        )
        first[r] = step_records(run)[0]["loss"]
    assert first[2] == pytest.approx(first[1], rel=1e-5) and first[4] == pytest.approx(first[1], rel=1e-5)


def test_the_gan_takes_the_same_first_step_on_1_2_and_4_replicas(tmp_path):
    first = {}
    for r in (1, 2, 4):
        run = distcore.train(
            "gan", None, tmp_path / f"g{r}", devices=r, max_steps=1, seed=2, train_examples=128, test_examples=64
        )
        first[r] = step_records(run)[0]
    for r in (2, 4):
        for key in ("d_loss", "g_loss"):
            assert first[r][key] == pytest.approx(first[1][key], rel=1e-5), (r, key)
    # Each replica draws its own rows of the global batch's latent vectors: had every replica drawn
    # the same ones, the 2-replica step would train on 32 distinct fakes and differ.
    assert 0.3 < first[1]["d_loss"] < 1.5


@pytest.fixture(scope="module")
def mine(tmp_path_factory):
    """The issue's contract, as written: a user's model on their arrays, trained, kept."""
    run_dir = tmp_path_factory.mktemp("runs") / "mine"
    run = distcore.train(
        distcore.Classifier(make_model),
        arrays(),
        run_dir=run_dir,
        devices=2,
        global_batch=32,
        max_steps=40,
        seed=1,
        epochs=3,
        learning_rate=0.01,
    )
    return run_dir, run


def test_the_contract_trains_records_and_keeps_the_arrays(mine):
    run_dir, run = mine
    assert run.state == "finished" and run.step == 40  # 15 steps an epoch (480 examples in 32s); max steps 40
    assert [r["step"] for r in step_records(run)] == list(range(1, 41))
    config = json.loads((run_dir / "config.json").read_text())
    assert config["data"] == "arrays" and config["model"] == "test_tasks:make_model"  # importable: named
    assert (run_dir / "data.npz").is_file()
    epoch = [r for r in run.records if runs.is_epoch_record(r)][-1]
    assert epoch["test_accuracy"] > 0.5  # three classes: it learned


def test_evaluation_with_no_strategy_and_on_3_replicas_gives_the_same_numbers(mine):
    run_dir, run = mine
    none = distcore.evaluate(run_dir, devices=None)
    three = distcore.evaluate(run_dir, devices=cpus(3))
    logged = [r for r in run.records if r.get("event") == "checkpoint"][-1]
    assert none["accuracy"] == three["accuracy"] == pytest.approx(logged["test_accuracy"], abs=1 / 120)
    assert three["loss"] == pytest.approx(none["loss"], rel=1e-5)
    assert none["examples"] == 120 and none["devices"] == ["no strategy"]


def test_an_exported_model_predicts_what_the_checkpoint_does_with_and_without_a_strategy(mine, tmp_path):
    run_dir, _ = mine
    out = distcore.export(run_dir, tmp_path / "mine.keras")
    assert out["format"] == "keras" and out["checkpoint"] == "ckpt-40"
    data = arrays()
    restored = checkpoints.restored(run_dir).runner.task.model(data.x_test).numpy()
    plain = keras.models.load_model(out["path"])
    np.testing.assert_allclose(plain(data.x_test).numpy(), restored, rtol=1e-6, atol=1e-6)
    with tf.distribute.MirroredStrategy(list(cpus(2))).scope():
        mirrored = keras.models.load_model(out["path"])
    np.testing.assert_allclose(mirrored(data.x_test).numpy(), restored, rtol=1e-6, atol=1e-6)
    accuracy = float(np.mean(np.argmax(restored, 1) == data.y_test))
    assert accuracy == pytest.approx(distcore.evaluate(run_dir, devices=None)["accuracy"], abs=1e-6)
    saved = distcore.export(run_dir, tmp_path / "mine-sm", format="savedmodel")
    loaded = tf.saved_model.load(saved["path"])  # (kept: its functions use its variables)
    served = loaded.serve(tf.constant(data.x_test))
    np.testing.assert_allclose(served.numpy(), restored, rtol=1e-6, atol=1e-6)
    with pytest.raises(distcore.DistcoreError, match="already exists"):
        distcore.export(run_dir, tmp_path / "mine.keras")


class Doubled(distcore.Task):
    """A user's own step, as the loop-from-scratch guide writes one: a linear model trained by
    plain SGD on a squared error, its loss divided by the global batch."""

    metrics = ("mse",)

    def build(self, config):
        self.model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
        self.optimizer = keras.optimizers.SGD(0.05)
        self.optimizer.build(self.model.trainable_variables)

    def train_step(self, batch, ctx):
        x, y = batch
        target = tf.cast(y, tf.float32)[:, None]
        with tf.GradientTape() as tape:
            error = tf.reduce_sum(tf.square(self.model(x, training=True) - target))
            loss = error / tf.cast(ctx.global_batch, tf.float32)
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
        return {"mse": loss}

    def checkpoint_items(self):
        return {"model": self.model, "optimizer": self.optimizer}


def test_a_users_own_step_gets_the_outer_loop_checkpoints_and_records(tmp_path):
    run = distcore.train(Doubled(), arrays(), tmp_path / "own", devices=2, global_batch=48, epochs=3, seed=0)
    steps = step_records(run)
    assert run.state == "finished" and [r["step"] for r in steps] == list(range(1, 31))
    assert set(runs.record_scalars(steps[0])) == {"mse"}
    assert steps[-1]["mse"] < steps[0]["mse"]  # it learned
    epochs = [r for r in run.records if runs.is_epoch_record(r)]
    assert [e["epoch"] for e in epochs] == [1, 2, 3] and "train_mse" in epochs[0]
    assert runs.list_checkpoints(tmp_path / "own") == ["ckpt-10", "ckpt-20", "ckpt-30"]
    assert json.loads((tmp_path / "own" / "config.json").read_text())["task"] == "test_tasks:Doubled"


class Regression(distcore.Task):
    """A user's step of real-valued targets: y reaches it as float32, of the arrays' shape."""

    metrics = ("mse",)

    def build(self, config):
        self.model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2)])
        self.optimizer = keras.optimizers.SGD(0.1)
        self.optimizer.build(self.model.trainable_variables)
        self.test_mse = keras.metrics.Mean()

    def train_step(self, batch, ctx):
        x, y = batch
        assert y.dtype == tf.float32 and y.shape[1:] == (2,), y  # checked as the step is traced
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(self.model(x, training=True) - y)) / tf.cast(ctx.global_batch, tf.float32)
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
        return {"mse": loss}

    def test_step(self, batch, ctx):
        x, y = batch
        self.test_mse.update_state(tf.reduce_sum(tf.square(self.model(x) - y), axis=1))

    def reset_test(self):
        self.test_mse.reset_state()

    def test_results(self):
        return {"test_mse": float(self.test_mse.result())}

    def checkpoint_items(self):
        return {"model": self.model, "optimizer": self.optimizer}


def test_real_valued_targets_train_a_users_step_the_same_on_1_and_2_replicas_and_not_the_classifier(tmp_path):
    rng = np.random.default_rng(3)
    w = rng.normal(size=(8, 2))
    x, xt = rng.normal(size=(480, 8)), rng.normal(size=(96, 8))
    data = distcore.Arrays(x, x @ w + 0.1 * rng.normal(size=(480, 2)), xt, xt @ w)
    losses = {}
    for r in (1, 2):
        run = distcore.train(Regression(), data, tmp_path / f"r{r}", devices=r, global_batch=48, epochs=3, seed=0)
        losses[r] = [s["mse"] for s in step_records(run)]
        assert run.state == "finished"
    assert losses[2] == pytest.approx(losses[1], rel=1e-5) and losses[1][-1] < losses[1][0] / 5  # it learned
    logged = [r for r in run.records if "test_mse" in r][-1]["test_mse"]
    evaluated = distcore.evaluate(tmp_path / "r2", devices=cpus(1), task=Regression())
    assert evaluated["mse"] == pytest.approx(logged, rel=1e-5) and logged < 0.5
    with pytest.raises(distcore.DistcoreError, match="the data's y are real values, not class labels"):
        distcore.train(distcore.Classifier(make_model), data, tmp_path / "clf", devices=2, global_batch=48)
    assert not (tmp_path / "clf").exists()


USER_MODULE = '''
import keras
import tensorflow as tf
import distcore


def make_model():
    return keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(3)])


class Mine(distcore.Classifier):
    """The classifier with the user's model, as a task of a module."""

    def __init__(self):
        super().__init__(make_model)


def make_task():
    return Mine()
'''


def cli(*args, cwd, **kwargs):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "distcore", *args]
    return subprocess.Popen(command, cwd=cwd, env=env, text=True, stdout=subprocess.PIPE, **kwargs)


def records_until(proc, step=None):
    """Read JSON records from `proc`; with `step`, SIGKILL it once that step is logged."""
    seen = []
    for line in proc.stdout:
        seen.append(json.loads(line))
        if step is not None and seen[-1].get("step") == step and runs.is_step_record(seen[-1]):
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait(timeout=300)
    return seen


@pytest.fixture(scope="module")
def user_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("user")
    (folder / "mymodule.py").write_text(USER_MODULE)
    data = arrays()
    np.savez(folder / "mine.npz", x_train=data.x_train, y_train=data.y_train, x_test=data.x_test, y_test=data.y_test)
    return folder


FLAGS = ("--replicas", "2", "--global-batch", "16", "--checkpoint-every", "10", "--steps-per-loop", "5")


@pytest.mark.parametrize(
    "what",
    [("--task", "mymodule:make_task", "--data", "mine.npz"), ("--task", "gan", "--train-examples", "480")],
    ids=["own-model-on-npz", "gan"],
)
def test_a_run_sigkilled_after_a_checkpoint_resumes_with_no_step_twice(user_folder, tmp_path, what):
    """SIGKILLed at step 17 (after ckpt-10), the run resumes from ckpt-10: steps 11-17 are trained
    again and logged once, and every step's numbers equal an uninterrupted run's."""
    test_examples = ("--test-examples", "120") if "gan" in what else ()
    whole = records_until(
        cli("train", *what, *FLAGS, *test_examples, "--run-dir", str(tmp_path / "a"), "--json", cwd=user_folder)
    )
    killed = cli("train", *what, *FLAGS, *test_examples, "--run-dir", str(tmp_path / "b"), "--json", cwd=user_folder)
    records_until(killed, step=17)
    assert runs.list_checkpoints(tmp_path / "b") == ["ckpt-10"]
    # An .npz run keeps a copy of the file in its folder: it resumes with the file moved away.
    npz = user_folder / "mine.npz"
    if "mine.npz" in what:
        assert (tmp_path / "b" / "data.npz").read_bytes() == npz.read_bytes()
        npz.rename(tmp_path / "moved.npz")
    try:
        resumed = records_until(cli("train", "--resume", "--run-dir", str(tmp_path / "b"), "--json", cwd=user_folder))
    finally:
        if (tmp_path / "moved.npz").exists():
            (tmp_path / "moved.npz").rename(npz)
    assert resumed[0]["event"] == "resume" and resumed[0]["step"] == 10
    logged = [r for r in runs.read_metrics(tmp_path / "b") if runs.is_step_record(r)]
    assert [r["step"] for r in logged] == list(range(1, 31))  # each step once
    reference = {r["step"]: runs.record_scalars(r) for r in whole if runs.is_step_record(r)}
    for record in logged:
        for key, value in runs.record_scalars(record).items():
            if key != "examples_per_sec":
                assert value == pytest.approx(reference[record["step"]][key], rel=1e-5), (record["step"], key)


def test_the_gan_draws_the_same_grid_from_a_checkpoint_on_any_device_set(tmp_path):
    run = distcore.train(
        "gan",
        None,
        tmp_path / "g",
        devices=2,
        max_steps=6,
        checkpoint_every=3,
        seed=3,
        train_examples=640,
        test_examples=128,
    )
    assert run.state == "finished"
    saved = sorted((tmp_path / "g" / "images").glob("*.png"))
    assert [p.name for p in saved] == ["step-00000003.png", "step-00000006.png"]
    none = distcore.evaluate(tmp_path / "g", devices=None)
    three = distcore.evaluate(tmp_path / "g", devices=cpus(3))
    for key in ("d_loss", "g_loss"):
        assert none[key] == pytest.approx(three[key], rel=1e-5)
    grids = [
        tf.io.decode_png(Path(p).read_bytes()).numpy().astype(int) for p in (none["grid"], three["grid"], saved[-1])
    ]
    assert grids[0].shape == (2 * 242, 2 * 242, 1)  # 8 x 8 images of 28 px with 2 px borders, doubled
    assert np.abs(grids[0] - grids[1]).max() <= 1 and np.abs(grids[0] - grids[2]).max() <= 1
    assert np.abs(grids[0] - tf.io.decode_png(saved[0].read_bytes()).numpy()).max() > 1  # it trained between
    exported = distcore.export(tmp_path / "g", tmp_path / "generator.keras")
    generator = keras.models.load_model(exported["path"])
    assert generator.output_shape == (None, 28, 28, 1)


def test_datasets_too_large_for_memory_train_resume_and_evaluate_from_their_functions(tmp_path):
    data = arrays()

    def train(epoch, seed):  # a pipeline of the caller's, in an order set by the epoch and seed alone
        ds = tf.data.Dataset.from_tensor_slices((data.x_train, data.y_train))
        return ds.shuffle(480, seed=seed * 1000 + epoch, reshuffle_each_iteration=False)

    def test():
        return tf.data.Dataset.from_tensor_slices((data.x_test, data.y_test))

    source = distcore.Datasets(train, test, train_examples=480, test_examples=120, classes=3)
    settings = dict(devices=2, global_batch=32, seed=4, learning_rate=0.01)
    first = distcore.train(distcore.Classifier(make_model), source, tmp_path / "d", epochs=2, max_steps=20, **settings)
    assert first.state == "finished" and first.step == 20
    with pytest.raises(distcore.DistcoreError, match="pass them again"):
        distcore.evaluate(tmp_path / "d", devices=None)
    again = distcore.train(
        distcore.Classifier(make_model), source, tmp_path / "d", resume=True, max_steps=0, **settings
    )
    assert again.state == "finished" and again.step == 30
    assert [r["step"] for r in step_records(again)] == list(range(1, 31))
    evaluated = distcore.evaluate(tmp_path / "d", devices=cpus(3), data=source)
    logged = [r for r in again.records if r.get("event") == "checkpoint"][-1]
    assert evaluated["accuracy"] == pytest.approx(logged["test_accuracy"], abs=1 / 120)
    whole = distcore.train(distcore.Classifier(make_model), source, tmp_path / "w", epochs=2, **settings)
    assert [r["loss"] for r in step_records(whole)] == pytest.approx([r["loss"] for r in step_records(again)], rel=1e-5)


def test_a_model_that_does_not_fit_the_data_is_refused_before_the_run_is_made(tmp_path):
    two_outputs = lambda: keras.Sequential([keras.Input((8,)), keras.layers.Dense(2)])  # noqa: E731
    wrong_input = lambda: keras.Sequential([keras.Input((5,)), keras.layers.Dense(3)])  # noqa: E731
    for factory, message in (
        (two_outputs, "the model gives 2 outputs but the labels go up to 2"),
        (wrong_input, "the model cannot take the data's examples of shape (8,): it takes examples of shape (5,)."),
        (lambda: tasks.Classifier("cnn").make_model(), "of shape (8,): it takes examples of shape (28, 28, 1)."),
    ):
        with pytest.raises(distcore.DistcoreError, match=re.escape(message)):
            distcore.train(distcore.Classifier(factory), arrays(), tmp_path / "r", devices=2, global_batch=8)
        assert not (tmp_path / "r").exists()  # nothing written


def test_a_model_given_built_instead_of_its_factory_is_refused_with_how_to_pass_it():
    with pytest.raises(distcore.DistcoreError, match="model must be a function that builds the model, not a model"):
        distcore.Classifier(make_model())


def test_task_references_name_what_another_process_can_import():
    assert tasks.task_reference(distcore.Classifier("mlp")) == ("classifier", "mlp")
    assert tasks.task_reference(distcore.GAN()) == ("gan", "cnn")
    assert tasks.task_reference(Doubled()) == ("test_tasks:Doubled", "cnn")
    with pytest.raises(distcore.DistcoreError, match="was defined in a script or notebook"):
        tasks.resolve("__main__:make_task")
    with pytest.raises(distcore.DistcoreError, match="cannot import 'no_such_module'"):
        tasks.resolve("no_such_module:make")


@pytest.mark.parametrize(
    ("doc", "marker", "labels"),
    [("README.md", "Classifier(make_model)", "y_train"), ("docs/tasks.md", "class Softmax", "y")],
)
def test_the_docs_notebook_examples_run_as_written_on_three_classes(doc, marker, labels, tmp_path, monkeypatch):
    block = next(b for b in re.findall(r"```python\n(.*?)```", (ROOT / doc).read_text(), re.S) if marker in b)
    monkeypatch.chdir(tmp_path)  # they write runs/ (and mine.keras) where they run
    namespace = {"__name__": "__main__"}
    exec(compile(block, doc, "exec"), namespace)
    assert np.unique(namespace[labels]).tolist() == [0, 1, 2]  # the 3 classes the 3-output model is for
    assert runs.read_status(tmp_path / "runs" / ("mine" if doc == "README.md" else "own"))["state"] == "finished"


def dropout_model():
    return keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dropout(0.3), keras.layers.Dense(3)]
    )


def test_a_model_with_dropout_resumes_exactly_and_a_checkpoint_without_its_generator_still_restores(
    tmp_path, monkeypatch
):
    settings = dict(devices=2, global_batch=32, steps_per_loop=3, seed=5)
    whole = distcore.train(distcore.Classifier(dropout_model), arrays(), tmp_path / "whole", max_steps=12, **settings)
    part = distcore.train(distcore.Classifier(dropout_model), arrays(), tmp_path / "part", max_steps=6, **settings)
    assert runs.list_checkpoints(tmp_path / "part") == ["ckpt-6"]
    resumed = distcore.train(
        distcore.Classifier(dropout_model), None, tmp_path / "part", resume=True, max_steps=12, devices=2
    )
    losses = lambda run: [r["loss"] for r in step_records(run)]  # noqa: E731
    assert losses(part)[:6] == losses(whole)[:6]
    assert losses(resumed) == losses(whole)  # the dropout masks of steps 7-12 too
    reader = tf.train.load_checkpoint(str(tmp_path / "whole" / "checkpoints" / "ckpt-12"))
    assert any(name.startswith("random/") for name in reader.get_variable_to_shape_map())
    # A checkpoint that lacks the generator's state (as distcore wrote before it saved it) still restores.
    with monkeypatch.context() as old:
        old.setattr(tasks.Classifier, "random_states", lambda self: {})
        distcore.train(distcore.Classifier(dropout_model), arrays(), tmp_path / "old", max_steps=6, **settings)
    evaluated = distcore.evaluate(tmp_path / "old", devices=cpus(1), task=distcore.Classifier(dropout_model))
    assert evaluated["checkpoint"] == "ckpt-6"
    again = distcore.train(
        distcore.Classifier(dropout_model), None, tmp_path / "old", resume=True, max_steps=9, devices=2
    )
    assert again.state == "finished" and losses(again)[:6] == losses(whole)[:6]


class Odd(Doubled):
    """A user's step with one mistake, set by `returns`."""

    returns = "dict"

    def train_step(self, batch, ctx):
        loss = super().train_step(batch, ctx)["mse"]
        return {
            "tensor": loss,
            "none": None,
            "other name": {"loss": loss},
            "per example": {"mse": tf.fill([ctx.local], loss)},
            "text": {"mse": "low"},
        }[self.returns]


@pytest.mark.parametrize(
    ("returns", "message"),
    [
        ("tensor", "Odd.train_step returned a tensor: it must return a dict of this replica's share"),
        ("none", "Odd.train_step returned NoneType: it must return a dict"),
        ("other name", "Odd.train_step returned no 'mse': it returns ['loss'], and its metrics are ('mse',)."),
        ("per example", "Odd.train_step's 'mse' is a float32 of shape (None,): it must be one number"),
        ("text", "Odd.train_step's 'mse' is a string of shape (): it must be one number"),
    ],
)
def test_a_users_step_that_returns_the_wrong_thing_is_told_what_it_must_return(returns, message, tmp_path):
    task = Odd()
    task.returns = returns
    with pytest.raises(distcore.DistcoreError, match=f"^{re.escape(message)}"):  # no "in user code" first
        distcore.train(task, arrays(), tmp_path / "odd", devices=2, global_batch=48, max_steps=2)


def test_a_task_with_bad_metrics_or_missing_methods_is_told_what_to_define(tmp_path):
    class Named(Doubled):
        metrics = "mse"

    class Bare(distcore.Task):
        pass

    with pytest.raises(distcore.DistcoreError, match=re.escape("Named's metrics ('mse') must be a tuple of names")):
        distcore.train(Named(), arrays(), tmp_path / "a", devices=2, global_batch=48, max_steps=2)
    with pytest.raises(distcore.DistcoreError, match=re.escape("task Bare has no build(config) method: define it")):
        distcore.train(Bare(), arrays(), tmp_path / "b", devices=2, global_batch=48, max_steps=2)


def test_a_resume_with_another_model_is_refused_and_leaves_the_finished_run_as_it_was(tmp_path):
    run_dir = tmp_path / "mine"
    distcore.train(distcore.Classifier(make_model), arrays(), run_dir, devices=2, global_batch=32, max_steps=4)
    status, config = runs.read_status(run_dir), (run_dir / "config.json").read_text()
    smaller = lambda: keras.Sequential([keras.Input((8,)), keras.layers.Dense(3)])  # noqa: E731
    with pytest.raises(
        distcore.DistcoreError, match=r"^no checkpoint of the run fits this model or task, so it is not"
    ):
        distcore.train(distcore.Classifier(smaller), None, run_dir, resume=True, devices=2, max_steps=8)
    assert runs.read_status(run_dir) == status and (run_dir / "config.json").read_text() == config


def test_datasets_functions_that_give_the_wrong_thing_are_refused_before_the_run_is_made(tmp_path):
    data = arrays()
    pairs = lambda x, y: tf.data.Dataset.from_tensor_slices((x, y))  # noqa: E731
    test = lambda: pairs(data.x_test, data.y_test)  # noqa: E731
    cases = [
        (
            lambda: pairs(data.x_train, data.y_train),
            test,
            "<lambda>() takes 0 positional arguments but 2 were given): give a function train(epoch, seed).",
        ),
        (lambda e, s: tf.data.Dataset.from_tensor_slices(data.x_train), test, "each must be one example as a pair"),
        (lambda e, s: pairs(data.x_train, data.y_train.astype(str)), test, "Datasets.train's y holds string values"),
        (lambda e, s: data.x_train, test, "Datasets.train returned ndarray: it must return a tf.data.Dataset"),
        (lambda e, s: pairs(data.x_train, data.y_train + 0.0), test, "the data's y are real values, not class labels"),
        (
            lambda e, s: pairs(data.x_train, data.y_train),
            lambda: pairs(data.x_test[:, :5], data.y_test),
            "(8,) but test of (5,)",
        ),
    ]
    for train, test_fn, message in cases:
        source = distcore.Datasets(train, test_fn, train_examples=480, test_examples=120)
        with pytest.raises(distcore.DistcoreError, match=re.escape(message)):
            distcore.train(distcore.Classifier(make_model), source, tmp_path / "d", devices=2, global_batch=32)
        assert not (tmp_path / "d").exists()


class Diverges(Doubled):
    """A step whose loss is finite for 2 steps, then NaN."""

    def train_step(self, batch, ctx):
        loss = super().train_step(batch, ctx)["mse"]
        return {"mse": tf.where(ctx.step > 2, tf.constant(float("nan")), loss)}


def test_a_loss_that_turns_nan_is_said_once_in_the_runs_log(tmp_path):
    run = distcore.train(Diverges(), arrays(), tmp_path / "nan", devices=2, global_batch=48, max_steps=6, seed=0)
    warnings = [r for r in run.records if r.get("event") == "warning"]
    assert [w["message"].split(":")[0] for w in warnings] == ["the mse is nan at step 3"]
    assert "training diverged" in warnings[0]["message"] and run.state == "finished"


def test_a_datasets_pipeline_shorter_than_its_train_examples_is_said(tmp_path):
    data = arrays()
    source = distcore.Datasets(
        lambda epoch, seed: tf.data.Dataset.from_tensor_slices((data.x_train[:320], data.y_train[:320])),
        lambda: tf.data.Dataset.from_tensor_slices((data.x_test, data.y_test)),
        train_examples=480,
        test_examples=120,
    )
    run = distcore.train(
        distcore.Classifier(make_model), source, tmp_path / "short", devices=2, global_batch=32, epochs=2
    )
    warnings = [r["message"] for r in run.records if r.get("event") == "warning"]
    assert run.step == 20 and len(warnings) == 1  # 10 steps an epoch, not 15; said once
    assert warnings[0].startswith("epoch 1 of Datasets.train ended after 10 of its 15 steps")


def test_a_resume_with_no_task_given_rebuilds_the_runs_own_model(tmp_path):
    own = lambda: keras.Sequential([keras.Input((8,)), keras.layers.Dense(3)])  # noqa: E731 (a notebook's: "saved")
    distcore.train(distcore.Classifier(own), arrays(), tmp_path / "r", devices=2, global_batch=32, max_steps=4)
    assert runs.read_config(tmp_path / "r")["model"] == "saved"
    with pytest.raises(distcore.DistcoreError, match="run r trained the task 'classifier', not 'gan': leave task out"):
        distcore.train("gan", run_dir=tmp_path / "r", resume=True, max_steps=8, devices=2)
    again = distcore.train(run_dir=tmp_path / "r", resume=True, max_steps=8, devices=2)  # not the default CNN
    assert again.state == "finished" and again.step == 8
