"""The app as an API: gradio_client against a real `python app.py` on loopback.

view_api lists only the public endpoints, each parameter named; docs/api.md's script starts a
2-replica run, follows it and evaluates its newest checkpoint; every public endpoint answers a bad
value with the page's message, and the app keeps serving.
"""

import os
import re
import socket
import subprocess
import sys

import numpy as np
import pytest
from gradio_client import Client, handle_file

from conftest import ROOT, wait_for
from distcore import jobs
from webapp import choices, evaluate as evaluate_tab, loss, setup, shell, train, trainapi
from webapp.format import plain_text
from webapp.settings import make_settings

PUBLIC = {
    "/plan_split",
    "/start_training",
    "/stop_training",
    "/resume_training",
    "/train_more",
    "/run_status",
    "/evaluate",
    "/loss_check",
    "/export_run",
    "/export_model",
    "/send_npz",
}
CPU_ONLY = {"tensorflow": "2.21.0", "gpus": [], "cpus": 1, "max_logical_cpus": 16}


def test_view_api_lists_the_public_endpoints_only_each_parameter_named(tmp_path):
    demo = shell.build_app(tmp_path, devices_info=CPU_ONLY, planner=jobs.Planner())
    named = demo.get_api_info()["named_endpoints"]
    # Compare's endpoints join as they land (issue 37): the page's own are exactly these.
    assert PUBLIC <= set(named) and not [n for n in named if re.search(r"lambda|partial|poll|load|restore", n)]
    for name, endpoint in named.items():
        names = [p["parameter_name"] for p in endpoint["parameters"]]
        assert not [n for n in names if n.startswith("param_")], (name, names)
    assert [p["parameter_name"] for p in named["/loss_check"]["parameters"]] == [
        "replicas",
        "gpus",
        "global_batch",
        "examples",
        "seed",
    ]
    for name in ("/start_training", "/resume_training"):  # the engine of 2+ worker processes, after the form
        assert [p["parameter_name"] for p in named[name]["parameters"]][-5:] == [
            "checkpoints_kept",
            "task",
            "data",
            "upload",
            "engine",
        ]
        engine = named[name]["parameters"][-1]
        assert engine["parameter_has_default"] and engine["parameter_default"] == "local"


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    home = tmp_path_factory.mktemp("api")
    root = home / "runs"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {
        **os.environ,
        "GRADIO_SERVER_PORT": str(port),
        "DISTCORE_RUNS_DIR": str(root),
        "DISTCORE_MAX_JOBS": "1",
        "GRADIO_ANALYTICS_ENABLED": "False",
    }
    env.pop("GRADIO_SERVER_NAME", None)
    with open(home / "app.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, str(ROOT / "app.py")], cwd=home, env=env, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}/"

    def up():
        try:
            Client(url, verbose=False)
            return True
        except Exception:
            return proc.poll() is not None

    try:
        assert wait_for(up, timeout=180, poll=0.5) and proc.poll() is None, (home / "app.log").read_text()[-2000:]
        yield url, root
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.slow
def test_the_documented_script_trains_follows_and_evaluates(app):
    url, root = app
    text = (ROOT / "docs" / "api.md").read_text()
    script = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    done = subprocess.run([sys.executable, "-c", script, url], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r"ckpt-20: accuracy 0\.\d{4}, loss \d+\.\d{4}", done.stdout), done.stdout
    assert re.search(r"finished at step 20: loss \d+\.\d{4}", done.stdout), done.stdout


@pytest.mark.slow
def test_each_public_endpoint_answers_a_bad_value_with_the_pages_message(app, tmp_path):
    url, root = app
    c = Client(url, verbose=False)
    settings = make_settings(root, max_jobs=1, devices_info=CPU_ONLY)  # the page's handlers, on the same folder
    bad_npz = tmp_path / "labels.npz"
    np.savez(bad_npz, x_train=np.zeros((4, 2)), y_train=[0, 1, 2, -1], x_test=np.zeros((1, 2)), y_test=[0])
    form = dict(replicas=2, gpus=[], global_batch=64, shard_policy="auto", input_api="dataset", model="cnn")
    form.update(optimizer="adam", learning_rate=0.001, epochs=1, max_steps=0, steps_per_loop=20)
    form.update(checkpoint_every=0, seed=0, train_examples=60000, test_examples=10000, drop_remainder=False)
    form.update(workers=1, checkpoints_kept=0)
    cases = [
        (
            c.predict(dataset_size=6, global_batch=0, replicas=2, api_name="/plan_split")[2]["error"],
            plain_text(setup.show_split(settings, None, "toy", 6, 60000, 0, 2, [], "auto", "dataset", 0, 0)[1]),
        ),
        (
            c.predict(run_name="../x", api_name="/start_training")[2]["message"],
            plain_text(train.start_run(settings, None, "../x", *form.values())[0]),
        ),
        (
            c.predict(**{**form, "run_name": "ok", "global_batch": 0}, api_name="/start_training")[2]["message"],
            plain_text(train.start_run(settings, None, "ok", *{**form, "global_batch": 0}.values())[0]),
        ),
        (
            c.predict(run="no-such-run", api_name="/stop_training")[1]["message"],
            plain_text(train.stop_run(settings, "no-such-run")),
        ),
        (
            c.predict(run="/etc", api_name="/resume_training")[2]["message"],
            plain_text(train.resume_run(settings, None, "/etc", *form.values())[0]),
        ),
        (
            c.predict(run="nope", api_name="/train_more")[2]["message"],
            plain_text(trainapi.train_more(settings, None, [], "nope")[0]),
        ),
        (c.predict(run="../x", api_name="/run_status")["message"], trainapi.status_record(settings, "../x")["message"]),
        (
            c.predict(run="nope", checkpoint="", api_name="/evaluate")[-1]["message"],
            plain_text(evaluate_tab.evaluate(settings, "nope", "", "none", 2, [])[0]),
        ),
        (
            c.predict(replicas=3, global_batch=6, examples=7, api_name="/loss_check")[1]["message"],
            plain_text(loss.check(settings, 3, [], 6, 7, 0)[0]),
        ),
        (c.predict(run="nope", api_name="/export_run")[1], train.export_run(settings, "nope")[1]),
        (
            c.predict(run="nope", checkpoint="", api_name="/export_model")[1],
            evaluate_tab.export_model(settings, "nope", "")[1],
        ),
        (
            c.predict(file=handle_file(str(bad_npz)), api_name="/send_npz")[-2]["message"],
            plain_text(choices.upload_data(settings, str(bad_npz))[0]),
        ),
    ]
    for got, page in cases:
        assert got and plain_text(got) == plain_text(page), (got, page)
    # Refused, each: nothing started or kept, and the app still serves a good request.
    assert not (root / "ok").exists() and not jobs.active_runs(root) and not (root / ".uploads").exists()
    good = c.predict(dataset_size=6, global_batch=4, replicas=2, api_name="/plan_split")[2]
    assert good["steps"] == [[[0, 1], [2, 3]], [[4], [5]]]
