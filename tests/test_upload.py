"""The training form's task, model and data choices (distcore.forms): an uploaded .npz is checked
before anything is kept, kept by its content under the runs folder's .uploads, and a refused one
writes nothing; the form offers only the built-ins and what the settings register. No Gradio
server, no TensorFlow."""

import dataclasses
import hashlib
import json

import numpy as np
import pytest

from distcore import cli, forms
from distcore.config import DistcoreError, SplitConfig, TrainConfig
from webapp import choices, setup
from webapp.format import is_error
from webapp.settings import make_settings

CPU_ONLY = {"tensorflow": "2.21.0", "gpus": [], "cpus": 1, "max_logical_cpus": 16}
MB = 2**20


def form(**over) -> list:
    """The training form's values, in forms.TRAIN_FORM order."""
    values = dict(
        count=2,
        boxes=[],
        batch=32,
        policy="auto",
        api="dataset",
        model="cnn",
        optimizer="adam",
        lr=0.001,
        epochs=1,
        max_steps=0,
        steps_per_loop=5,
        ckpt_every=0,
        seed=0,
        train_examples=100,
        test_examples=20,
        drop=False,
        workers=1,
        ckpt_keep=0,
        task="classifier",
        data="fashion-mnist",
        upload=None,
    )
    assert not set(over) - set(values), over
    values.update(over)
    assert list(values) == [key for key, _ in forms.TRAIN_FORM]
    return list(values.values())


def arrays(rows=100, test=20, shape=(28, 28), classes=3):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (rows + test, *shape), dtype=np.uint8)
    y = np.arange(rows + test) % classes
    return {"x_train": x[:rows], "y_train": y[:rows], "x_test": x[rows:], "y_test": y[rows:]}


@pytest.fixture
def runs(tmp_path):
    """A runs folder holding one run, which no upload may touch."""
    root = tmp_path / "runs"
    (root / "mine" / "checkpoints").mkdir(parents=True)
    (root / "mine" / "config.json").write_text("{}")
    return root


@pytest.fixture
def offer(runs):
    return forms.Offer(uploads=runs / forms.UPLOADS_FOLDER, max_upload_bytes=MB)


def files(root) -> dict:
    """Every file under `root` with its size and modification time: what a refused upload must leave as it was."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


def test_a_checked_upload_is_kept_by_its_content_once_and_trains_from_the_form(tmp_path, runs, offer):
    source = tmp_path / "in" / "digits.npz"
    source.parent.mkdir()
    np.savez(source, **arrays())
    record = forms.store_upload(source, offer)
    key = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    assert record == {
        "upload": key,
        "name": "digits.npz",
        "train_rows": 100,
        "test_rows": 20,
        "shape": [28, 28],
        "classes": 3,
        "targets": "labels",
        "bytes": source.stat().st_size,
    }
    kept = runs / ".uploads" / f"{key}.npz"
    assert kept.read_bytes() == source.read_bytes() and json.loads(kept.with_suffix(".json").read_text()) == record
    assert (runs / "mine" / "config.json").read_text() == "{}"  # the run is as it was
    # The same bytes under another name: the same id, one copy.
    again = tmp_path / "in" / "copy.npz"
    again.write_bytes(source.read_bytes())
    assert forms.store_upload(again, offer)["upload"] == key
    assert sorted(p.name for p in (runs / ".uploads").iterdir()) == [f"{key}.json", f"{key}.npz"]
    assert forms.upload_line(record) == "**digits.npz**: 100 + 20 rows of 28×28, 3 classes"

    # The form trains on it by its id: its path in config.json, its rows the bound of the examples.
    cfg = forms.train_config((), *form(data="npz", upload=key), offer=offer)
    assert cfg.data == str(kept) and (cfg.train_examples, cfg.test_examples) == (100, 20)
    assert forms.data_rows("npz", key, offer) == (100, 20)
    assert forms.form_values(cfg, offer)["data"] == "npz" and forms.form_values(cfg, offer)["upload"] == key
    assert forms.summary(cfg, offer).startswith("cnn · adam 0.001 · 1 epoch (4 steps) of 100 examples (copy.npz)")
    with pytest.raises(DistcoreError, match=r"training examples \(101\) must be at most the 100 rows copy.npz has"):
        forms.train_config((), *form(data="npz", upload=key, train_examples=101), offer=offer)
    with pytest.raises(DistcoreError, match="no .npz file is uploaded yet"):
        forms.train_config((), *form(data="npz"), offer=offer)
    with pytest.raises(DistcoreError, match="is not the id of an upload"):
        forms.train_config((), *form(data="npz", upload="../../mine/config"), offer=offer)
    with pytest.raises(DistcoreError, match="no longer kept here"):
        forms.train_config((), *form(data="npz", upload="0" * 16), offer=offer)
    # The GAN takes 28x28 images only: an upload of other examples is refused before any process starts.
    np.savez(tmp_path / "in" / "small.npz", **arrays(shape=(8, 8)))
    small = forms.store_upload(tmp_path / "in" / "small.npz", offer)["upload"]
    with pytest.raises(DistcoreError, match="the GAN generates 28×28 grey images .* small.npz holds 8×8"):
        forms.train_config((), *form(task="gan", data="npz", upload=small), offer=offer)
    with pytest.raises(DistcoreError, match="small.npz holds 8×8"):  # said under the data choice, at once
        forms.data_note("gan", "npz", small, offer)
    assert forms.data_note("classifier", "npz", small, offer).startswith("**small.npz**: 100 + 20 rows of 8×8")
    with pytest.raises(DistcoreError, match="the MLP takes 28×28 grey images; small.npz holds 8×8: train it with"):
        forms.train_config((), *form(data="npz", upload=small, model="mlp"), offer=offer)  # at Start, not in the run
    # Real-valued targets train a task of one's own; the classifier refuses them, under the choice and at Start.
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "in" / "prices.npz", **{**arrays(), "y_train": rng.normal(size=100), "y_test": rng.random(20)})
    prices = forms.store_upload(tmp_path / "in" / "prices.npz", offer)
    assert (prices["classes"], prices["targets"]) == (None, "values")
    assert forms.upload_line(prices) == "**prices.npz**: 100 + 20 rows of 28×28, real-valued targets"
    for refused in (
        lambda: forms.data_note("classifier", "npz", prices["upload"], offer),
        lambda: forms.train_config((), *form(data="npz", upload=prices["upload"]), offer=offer),
    ):
        with pytest.raises(DistcoreError, match="prices.npz holds real-valued targets, not class labels"):
            refused()


def save_object_array(path):
    np.savez(path, x_train=np.array([{"a": 1}] * 3, dtype=object), y_train=[0, 1, 2], x_test=[[1]], y_test=[0])


BAD = {
    "wrong keys": (lambda p: np.savez(p, x=np.zeros((4, 2)), y=np.zeros(4)), "has no x_train, y_train, x_test, y_test"),
    "rows that disagree": (
        lambda p: np.savez(p, **{**arrays(), "y_train": np.zeros(99, int)}),
        "x_train in bad.npz has 100 rows but y_train has 99",
    ),
    "a negative label": (
        lambda p: np.savez(p, **{**arrays(), "y_train": -np.ones(100, int)}),
        "y_train in bad.npz holds -1: labels must be class numbers from 0 up",
    ),
    "an object array": (save_object_array, "bad.npz holds arrays numpy cannot read without pickle"),
    "not a zip": (lambda p: p.write_text("x_train,y_train\n1,2\n"), "bad.npz is not an .npz file"),
    "too large": (
        lambda p: np.savez(p, **{**arrays(), "x_train": np.random.default_rng(1).random((100, 1500))}),
        r"bad.npz is 1\.\d MB: an upload may be at most 1\.0 MB \(DISTCORE_MAX_UPLOAD_MB\)",
    ),
    "unpacking to too much": (
        lambda p: np.savez_compressed(p, **{**arrays(), "x_train": np.zeros((100, 120_000), np.uint8)}),
        r"bad.npz unpacks to 11\.\d MB: an upload's arrays may take at most 10\.0 MB unpacked",
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_refused_upload_says_why_and_writes_nothing(case, tmp_path, runs, offer):
    make, message = BAD[case]
    source = tmp_path / "in" / "bad.npz"
    source.parent.mkdir()
    make(source)
    before = files(runs)
    with pytest.raises(DistcoreError, match=message) as refused:
        forms.store_upload(source, offer)
    assert str(source.parent) not in str(refused.value)  # the file by its name, not Gradio's folder
    assert files(runs) == before and not (runs / ".uploads").exists()
    # The page's upload box says the same in place, keeps no id, and empties itself.
    settings = dataclasses.replace(make_settings(runs, max_jobs=1, devices_info=CPU_ONLY), offer=offer)
    note, upload, *_, answer, box = choices.upload_data(settings, str(source))
    assert is_error(note) and upload == "" and box is None and answer == {"ok": False, "message": str(refused.value)}
    assert files(runs) == before
    # Emptying the id redraws the data note after this reply; it still says why.
    _, redrawn, *_ = choices.data_shown(settings, "classifier", "npz", upload, answer)
    assert is_error(redrawn) and str(refused.value).split(":")[0] in redrawn
    assert choices.data_shown(settings, "classifier", "npz", "", {"ok": True})[1] == ""
    assert not is_error(choices.data_shown(settings, "classifier", "fashion-mnist", "", answer)[1])


def test_the_form_offers_the_built_ins_and_what_the_settings_register(monkeypatch, runs):
    assert forms.registered("DISTCORE_MODELS", " wide=mymodels:wide_cnn, tiny = pkg.models:make ,") == (
        ("wide", "mymodels:wide_cnn"),
        ("tiny", "pkg.models:make"),
    )
    for text, message in (
        ("wide", "'wide' must be name=module:function"),
        ("wide=mymodels", "must be name=module:function"),
        ("a b=m:f", "must be name=module:function"),
        ("cnn=m:f", "the name 'cnn' is taken"),
        ("w=m:f,W=m:g", "the name 'W' is taken"),
    ):
        with pytest.raises(DistcoreError, match=message):
            forms.registered("DISTCORE_MODELS", text)
    monkeypatch.setenv("DISTCORE_MODELS", "wide=mymodels:wide_cnn")
    monkeypatch.setenv("DISTCORE_TASKS", "mine=mytasks:make_task")
    monkeypatch.setenv("DISTCORE_MAX_UPLOAD_MB", "5")
    offer = forms.make_offer(runs, mnist=False)
    assert offer.max_upload_bytes == 5 * MB and offer.uploads == runs / ".uploads"
    assert forms.model_choices(offer) == [("CNN", "cnn"), ("MLP", "mlp"), ("wide", "mymodels:wide_cnn")]
    assert forms.task_choices(offer) == [("Classifier", "classifier"), ("GAN", "gan"), ("mine", "mytasks:make_task")]
    assert forms.data_choices(offer) == [("Fashion-MNIST", "fashion-mnist"), ("Your .npz", "npz")]
    assert make_settings(runs, max_jobs=1, devices_info=CPU_ONLY).offer.models == offer.models
    monkeypatch.setenv("DISTCORE_MAX_UPLOAD_MB", "0")
    with pytest.raises(DistcoreError, match="DISTCORE_MAX_UPLOAD_MB"):
        forms.make_offer(runs)

    # A registered model by its name or its reference; any other function is refused, so a client
    # of the API never names code of its own.
    assert forms.train_config((), *form(model="wide"), offer=offer).model == "mymodels:wide_cnn"
    assert forms.train_config((), *form(model="MLP"), offer=offer).model == "mlp"
    for model in ("os:getcwd", "saved", "mymodels:other"):
        with pytest.raises(DistcoreError, match=f"model '{model}' is not offered here.*DISTCORE_MODELS"):
            forms.train_config((), *form(model=model), offer=offer)
    with pytest.raises(DistcoreError, match="task 'shutil:rmtree' is not offered here.*DISTCORE_TASKS"):
        forms.train_config((), *form(task="shutil:rmtree"), offer=offer)
    mine = forms.train_config((), *form(task="mine", model="mlp"), offer=offer)
    assert (mine.task, mine.model) == ("mytasks:make_task", "cnn")  # a task of your own builds its own models
    # The GAN trains the guide's two models with their own optimizers: the form's model fields do not apply.
    gan = forms.train_config((), *form(task="GAN", model="mlp", optimizer="sgd", lr=0.5), offer=offer)
    assert (gan.task, gan.model, gan.optimizer, gan.learning_rate) == ("gan", "cnn", "adam", 0.001)
    assert forms.summary(gan, offer).startswith("GAN · 1 epoch (4 steps) of 100 examples (Fashion-MNIST) · batch 32")
    # MNIST only where this machine has it; a path is never a form's data.
    with pytest.raises(DistcoreError, match="MNIST is not on this machine"):
        forms.train_config((), *form(data="mnist"), offer=offer)
    assert forms.train_config((), *form(data="mnist"), offer=forms.Offer(mnist=True)).data == "mnist"
    with pytest.raises(DistcoreError, match="data '/etc/data.npz' is not offered here"):
        forms.train_config((), *form(data="/etc/data.npz"), offer=offer)
    assert forms.gan_data(offer) == "fashion-mnist" and forms.gan_data(forms.Offer(mnist=True)) == "mnist"
    assert (
        forms.data_note("gan", "fashion-mnist", None, offer)
        == "The GAN trains on Fashion-MNIST: this machine has no MNIST."
    )
    assert (
        forms.data_note("gan", "mnist", None, forms.Offer(mnist=True)) == "The GAN trains on MNIST, as the guide does."
    )
    assert forms.data_note("classifier", "fashion-mnist", None, offer) == ""
    # A run of a task this app does not offer: the form cannot show it (Use its settings leaves it).
    values = forms.form_values(TrainConfig(devices=("cpu:0",), task="other:task"), offer)
    assert forms.not_offered(values, offer) == {"task": "other:task"}


def test_the_split_of_an_uploads_rows_is_bounded_by_its_rows(tmp_path, runs):
    settings = make_settings(runs, max_jobs=1, devices_info=CPU_ONLY)
    np.savez(tmp_path / "rows.npz", **arrays(rows=100))
    key = forms.store_upload(tmp_path / "rows.npz", settings.offer)["upload"]
    figure, notes, plan = setup.show_split(
        settings, None, setup.FASHION, 150, 101, 32, 2, [], "auto", "dataset", False, 0, 1, 0, "npz", key
    )
    assert figure is None and plan == {"error": "train examples (101) must be a whole number from 1 to 100."}
    # The planner process reads the data's rows too: more than Fashion-MNIST's 60,000 pass.
    request = forms.planner_request(
        SplitConfig(examples=70_000, global_batch=64, devices=("cpu:0",), shuffle_seed=0, rows=80_000)
    )
    assert request["rows"] == 80_000 and cli.split_config(request, ("cpu:0",)).rows == 80_000
