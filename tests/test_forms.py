"""distcore.forms and distcore.explain: form values -> TrainConfig -> command line -> the CLI's
parser -> the same TrainConfig; the resume rules in the form's words. No Gradio, no TensorFlow."""

import dataclasses
import subprocess
import sys

import pytest

from conftest import ROOT
from distcore import cli, devices, explain, forms
from distcore.config import DistcoreError, SplitConfig, TrainConfig


@pytest.fixture(autouse=True)
def no_gpus(monkeypatch):
    """The CLI's parser resolves --devices against the GPUs; asking TensorFlow is not needed here."""
    monkeypatch.setattr(devices, "physical_gpu_count", lambda: 0)


def parsed_train(args: list[str], tmp_path) -> TrainConfig:
    """What `distcore train` (or `cluster`) makes of these flags, as cmd_train and cmd_cluster do."""
    run_dir = str(tmp_path / "run")
    if args and args[0] == "--workers":
        ns = cli.build_parser().parse_args(["cluster", "--run-dir", run_dir, *args])
        return TrainConfig(**cli.train_flags(ns), devices=("cpu:0",), workers=int(ns.workers))
    return cli.train_config(cli.build_parser().parse_args(["train", "--run-dir", run_dir, *args]))


CONFIGS = [
    TrainConfig(devices=("cpu:0", "cpu:1")),
    TrainConfig(
        devices=("cpu:0", "cpu:1", "cpu:2"),
        global_batch=96,
        epochs=3,
        max_steps=500,
        seed=7,
        steps_per_loop=5,
        checkpoint_every=30,
        keep_checkpoints=2,
        model="mlp",
        optimizer="sgd",
        learning_rate=0.05,
        l2=0.001,
        policy="data",
        api="function",
        drop_remainder=True,
        train_examples=6000,
        test_examples=500,
    ),
    TrainConfig(devices=("cpu:0",), workers=2, policy="data", max_steps=12, train_examples=640),
    TrainConfig(devices=("cpu:0", "cpu:1"), task="gan", data="mnist", train_examples=256, test_examples=256),
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=["defaults", "every-field", "two-workers", "gan"])
def test_a_config_goes_through_the_command_line_and_comes_back_the_same(cfg, tmp_path):
    args = forms.train_args(cfg)
    if cfg.workers > 1:
        assert "--devices" not in args  # each worker has its own devices
        args = ["--workers", str(cfg.workers), *args]
    assert parsed_train(args, tmp_path) == cfg


def test_every_training_flag_of_the_cli_is_one_the_builder_knows():
    assert set(cli.TRAIN_FLAGS) | {"devices"} == set(forms.TRAIN_FIELDS)
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    assert set(forms.TRAIN_FIELDS) | {"workers"} == fields
    assert set(forms.FIELD_LABELS) == fields  # every field has words for a message


def test_the_apps_command_lines_are_the_ones_it_always_sent():
    cfg = forms.train_config(
        (), 2, [], 64, "auto", "dataset", "cnn", "adam", 0.001, 1, 20, 5, 0, 0, 2048, 500, False, 1, 0
    )
    assert forms.train_args(cfg) == [
        "--devices",
        "cpu:0,cpu:1",
        "--global-batch",
        "64",
        "--epochs",
        "1",
        "--max-steps",
        "20",
        "--seed",
        "0",
        "--steps-per-loop",
        "5",
        "--checkpoint-every",
        "0",
        "--keep-checkpoints",
        "0",
        "--model",
        "cnn",
        "--optimizer",
        "adam",
        "--learning-rate",
        "0.001",
        "--policy",
        "auto",
        "--api",
        "dataset",
        "--train-examples",
        "2048",
        "--test-examples",
        "500",
    ]
    assert forms.resume_args(cfg.replace(epochs=3)) == [
        "--devices",
        "cpu:0,cpu:1",
        "--epochs",
        "3",
        "--max-steps",
        "20",
        "--steps-per-loop",
        "5",
        "--checkpoint-every",
        "0",
        "--keep-checkpoints",
        "0",
    ]


def test_resume_flags_parse_back_to_the_resumable_fields(tmp_path):
    cfg = TrainConfig(
        devices=("cpu:0", "cpu:1", "cpu:2"),
        epochs=3,
        max_steps=0,
        steps_per_loop=10,
        checkpoint_every=30,
        keep_checkpoints=4,
    )
    ns = cli.build_parser().parse_args(["train", "--run-dir", str(tmp_path / "r"), "--resume", *forms.resume_args(cfg)])
    given = {k: v for k, v in cli.train_flags(ns).items()}
    assert given == {
        "epochs": "3",
        "max_steps": "0",
        "steps_per_loop": "10",
        "checkpoint_every": "30",
        "keep_checkpoints": "4",
    }
    assert cli.device_names(ns) == cfg.devices


def test_the_engine_picks_the_launch_command_and_a_ray_run_parses_back_the_same(tmp_path):
    assert forms.launch_command(1, "ray") == ["train"]  # one process: no workers to place
    assert forms.launch_command(2) == forms.launch_command(2, "local") == ["cluster", "--workers", "2"]
    assert forms.launch_command(2, "ray") == ["train", "--engine", "ray", "--workers", "2"]
    command = forms.launch_command(3, "ray", "10.0.0.1:6379")
    assert command == ["train", "--engine", "ray", "--workers", "3", "--ray-address=10.0.0.1:6379"]
    with pytest.raises(DistcoreError, match="engine 'spark' must be one of: local, ray"):
        forms.launch_command(2, "spark")
    # As the app launches it (jobs.launch: the command, --run-dir, the flags), and as rayengine.train
    # reads it: the same configuration, on 3 Ray workers of one CPU replica each.
    cfg = CONFIGS[2].replace(workers=3)
    ns = cli.build_parser().parse_args([*command, "--run-dir", str(tmp_path / "run"), *forms.train_args(cfg)])
    assert (ns.command, ns.engine, ns.workers, ns.ray_address) == ("train", "ray", "3", "10.0.0.1:6379")
    assert not ns.multi_worker and ns.replicas is None and ns.devices is None
    assert TrainConfig(**cli.train_flags(ns), devices=("cpu:0",), workers=int(ns.workers)) == cfg
    resume = [*forms.launch_command(2, "ray"), "--run-dir", "r", "--resume", *forms.resume_args(cfg.replace(epochs=3))]
    ns = cli.build_parser().parse_args(resume)
    assert ns.resume and ns.engine == "ray" and ns.ray_address is None and cli.train_flags(ns)["epochs"] == "3"


def test_the_ray_engine_is_offered_where_ray_is_installed_and_read_without_importing_it(tmp_path, monkeypatch):
    here, missing = forms.Offer(ray=True), forms.Offer()
    assert forms.engine_choices(here) == [("local processes", "local"), ("Ray", "ray")]
    assert forms.engine_choices(missing) == [("local processes", "local")]
    assert forms.pick_engine("ray", 2, here) == forms.pick_engine("Ray", 2, here) == "ray"
    assert forms.pick_engine(None, 2, here) == forms.pick_engine("", 2, here) == "local"
    assert forms.pick_engine("ray", 1, here) == "local"  # one worker process trains in one process
    assert forms.pick_engine("ray", 1, missing) == "local"
    with pytest.raises(DistcoreError, match="needs Ray where the app runs.*pip install 'distcore\\[ray\\]'"):
        forms.pick_engine("ray", 2, missing)
    with pytest.raises(DistcoreError, match="engine 'spark' is not offered here: it must be one of: local\\."):
        forms.pick_engine("spark", 1, missing)
    cfg = CONFIGS[2]
    assert " · batch 64 on 2 worker processes on Ray · DATA" in forms.summary(cfg, here, "ray")
    assert " · batch 64 on 2 worker processes · DATA" in forms.summary(cfg, here)
    assert forms.where_trained(CONFIGS[0].devices, CONFIGS[0].workers, "ray") == "cpu:0, cpu:1"
    assert forms.where_trained(("cpu:0",), 2, "ray", each=True) == "2 worker processes on Ray (cpu:0 each)"
    # DISTCORE_RAY_ADDRESS: the cluster the app's Ray runs join; Ray found without being imported.
    monkeypatch.setenv("DISTCORE_RAY_ADDRESS", " 10.0.0.1:6379 ")
    offer = forms.make_offer(tmp_path, mnist=False)
    assert offer.ray is forms.ray_installed() and offer.ray_address == "10.0.0.1:6379"
    monkeypatch.delenv("DISTCORE_RAY_ADDRESS")
    assert forms.make_offer(tmp_path, mnist=False, ray=False) == forms.Offer(uploads=tmp_path / forms.UPLOADS_FOLDER)
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` would fail
    assert forms.ray_installed() is False


def test_a_split_on_workers_goes_through_the_command_line_and_comes_back_the_same():
    for cfg in (
        SplitConfig(examples=12, global_batch=4, devices=("cpu:0",), policy="data", files=2, workers=2),
        SplitConfig(
            examples=12,
            global_batch=6,
            devices=("cpu:0",),
            api="function",
            drop_remainder=True,
            workers=3,
            shuffle_seed=5,
        ),
    ):
        args = forms.split_args(cfg)
        ns = cli.build_parser().parse_args(args)
        request = {
            "examples": ns.examples,
            "global_batch": ns.global_batch,
            "policy": ns.policy,
            "api": ns.api,
            "drop_remainder": ns.drop_remainder,
            "files": ns.files,
            "shuffle_seed": ns.shuffle_seed,
            "workers": int(ns.workers),
        }  # as cmd_split reads them
        assert cli.split_config(request, ("cpu:0",)) == cfg


def test_form_values_become_a_checked_config():
    form = dict(
        count=2,
        boxes=[],
        batch=64,
        policy="auto",
        api="dataset",
        model="cnn",
        optimizer="adam",
        lr=0.001,
        epochs=1,
        max_steps=None,
        steps_per_loop=5,
        ckpt_every=None,
        seed=None,
        train_examples=2048,
        test_examples=500,
        drop=None,
        workers=1,
        ckpt_keep=None,
    )
    cfg = forms.train_config((), *form.values())
    assert cfg == TrainConfig(devices=("cpu:0", "cpu:1"), steps_per_loop=5, train_examples=2048, test_examples=500)
    assert forms.form_values(cfg) == {
        **{k: v for k, v in form.items() if k not in ("count", "boxes")},
        "max_steps": 0,
        "ckpt_every": 0,
        "seed": 0,
        "drop": False,
        "ckpt_keep": 0,
        "task": "classifier",
        "data": "fashion-mnist",
        "upload": None,
    }
    two = forms.train_config((), *{**form, "workers": 2, "count": 5}.values())
    assert two.devices == ("cpu:0",) and two.workers == 2  # one CPU replica per worker process
    on_gpus = forms.train_config(("gpu:0", "gpu:1"), *{**form, "boxes": ["gpu:1"]}.values())
    assert on_gpus.devices == ("gpu:1",)
    with pytest.raises(DistcoreError, match="worker processes \\(9\\) must be a whole number from 1 to 8"):
        forms.train_config((), *{**form, "workers": 9}.values())
    with pytest.raises(DistcoreError, match="device set is empty: choose how many logical CPU devices"):
        forms.train_config((), *{**form, "count": None}.values())
    assert forms.replica_count((), 3, [], 1) == 3 and forms.replica_count((), 3, [], 4) == 4


def test_a_resume_may_change_only_the_resumable_fields_and_says_which_in_the_forms_words():
    saved = TrainConfig(devices=("cpu:0", "cpu:1"), train_examples=6000, l2=0.001)
    form = TrainConfig(devices=("cpu:0", "cpu:1", "cpu:2"), train_examples=6000, epochs=3, keep_checkpoints=4)
    wanted = forms.resumed_config("ra", saved, form)
    assert wanted.l2 == 0.001  # the form has no L2 field: the run's is kept
    assert forms.resume_changes(saved, wanted) == [
        "epochs 1 → 3",
        "checkpoints kept 0 (all) → 4",
        "devices cpu:0,cpu:1 → cpu:0,cpu:1,cpu:2",
    ]
    with pytest.raises(DistcoreError) as refused:
        forms.resumed_config("ra", saved, form.replace(model="mlp", global_batch=128))
    assert str(refused.value).startswith(
        "The training form differs from run ra in model (the run: cnn, the form: mlp), global batch size "
        "(the run: 64, the form: 128)"
    )
    assert str(refused.value).endswith(
        "A resume may change only epochs, max steps, steps per loop, checkpoint interval, checkpoints kept, "
        "devices and worker processes."
    )
    # The rule is TrainConfig's own: the form passes on exactly what it allows, less the data folder.
    assert set(forms.FORM_RESUMABLE) == set(TrainConfig.RESUMABLE) - {"data_dir"}
    assert forms.shown("max_steps", 0) == "no limit" and forms.shown("devices", ("cpu:0",)) == "cpu:0"


def test_explanations_of_batch_cuts_and_stops():
    assert explain.batch_note((), 64, 2, []) == "Per-replica batch: **32** (64 / 2 replicas)"
    assert "(1 / 8 replicas = 0.125)" in explain.batch_note((), 1, 8, [])
    assert "(64 / 3 replicas ≈ 21.333)" in explain.batch_note((), 64, 3, [])
    assert "(1 / 2 replicas = 0.5: one CPU replica per worker process)" in explain.batch_note((), 1, 2, [], 2)
    with pytest.raises(DistcoreError, match="global batch size is empty"):
        explain.batch_note((), None, 2, [])
    assert explain.stop_point({"steps_per_loop": 1}) == (
        "it stops at the end of the current loop (steps per loop: 1 step; a process's first loop is its first "
        "step), saves a checkpoint and exits."
    )
    assert explain.before_training_stop("r", []) == (
        "Stopping **r**: training has not begun, so it exits at step 0 with nothing to save."
    )
    assert explain.before_training_stop("r", ["ckpt-5", "ckpt-140"]).endswith(
        "exits at step 140, where it resumed from; its checkpoint ckpt-140 stays."
    )


def test_the_library_modules_import_neither_gradio_nor_tensorflow():
    code = (
        "import sys; from distcore import forms, explain, follow, joblimit, jobs; "
        "forms.make_offer('runs', mnist=False); "
        "bad = [m for m in ('gradio', 'tensorflow', 'ray') if m in sys.modules]; assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=120)
