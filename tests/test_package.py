"""distcore as an installed package: the public API, an install outside the checkout, the CLI's --help."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from distcore import cli

PUBLIC = {
    "TrainConfig",
    "SplitConfig",
    "DistcoreError",
    "Controller",
    "StopFlag",
    "configure_devices",
    "plan_split",
    "evaluate",
    "loss_check",
}
USER_COMMANDS = {"devices", "split", "train", "cluster", "evaluate", "export", "loss-check", "bench", "sweep", "runs"}
HEAVY = ("tensorflow", "keras", "gradio")


def python(code: str, cwd, env=None, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})},
    )


def test_import_distcore_loads_no_tensorflow_and_offers_the_public_api(tmp_path):
    code = (
        "import json, sys, distcore; "
        f"print(json.dumps([sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}), "
        "sorted(distcore.__all__), sorted(dir(distcore)), distcore.__version__]))"
    )
    proc = python(code, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    heavy, public, listed, version = json.loads(proc.stdout)
    assert heavy == []
    assert PUBLIC <= set(public) and set(public) <= set(listed)
    assert version == "0.1.0"


@pytest.mark.slow  # resolving Controller imports TensorFlow
def test_each_public_name_resolves_to_a_documented_object(tmp_path):
    code = (
        "import inspect, json, distcore; "
        "print(json.dumps({n: [getattr(distcore, n).__module__, inspect.getdoc(getattr(distcore, n)) or '']"
        " for n in distcore.__all__}))"
    )
    proc = python(code, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)
    assert PUBLIC <= set(found)
    for name, (module, doc) in found.items():
        assert module.startswith("distcore."), name
        assert len(doc.split()) >= 8, f"distcore.{name} needs a docstring saying what it does"
    assert found["plan_split"][0] == "distcore.split" and found["configure_devices"][0] == "distcore.devices"
    assert found["evaluate"][0] == "distcore.checkpoints" and found["loss_check"][0] == "distcore.losscheck"


def test_an_unknown_name_is_an_attribute_error_and_submodules_still_import():
    import distcore

    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        distcore.nothing_here  # noqa: B018
    from distcore import split  # a module, not the public plan_split

    assert split.__name__ == "distcore.split"


def copy_of_checkout(dest: Path) -> Path:
    """The checkout as a fresh clone holds it, so the build writes nothing into the shared tree."""
    junk = shutil.ignore_patterns(
        ".git",
        ".venv",
        "runs",
        "__pycache__",
        "*.egg-info",
        "build",
        "dist",
        ".ruff_cache",
        ".hypothesis",
        ".pytest_cache",
        ".cache",
    )
    return Path(shutil.copytree(ROOT, dest, ignore=junk))


@pytest.mark.slow  # pip builds the package; the installed copy then imports TensorFlow
def test_an_install_outside_the_checkout_works_from_any_folder(tmp_path):
    pytest.importorskip("setuptools", minversion="64", reason="a build without network needs setuptools in .venv")
    source, target, elsewhere = copy_of_checkout(tmp_path / "src"), tmp_path / "site", tmp_path / "elsewhere"
    elsewhere.mkdir()
    install = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--target",
            str(target),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert install.returncode == 0, install.stderr
    # Only the library is installed: not the app's UI package, not the tests.
    assert {p.name for p in target.iterdir()} == {"distcore", "distcore-0.1.0.dist-info", "bin"}
    # The installed copy first on the path; .venv's site-packages supply TensorFlow.
    env = {"PYTHONPATH": str(target)}
    code = (
        "import importlib.metadata, distcore; distcore.Controller; distcore.plan_split; "
        "print(distcore.__file__, importlib.metadata.version('distcore'))"
    )
    proc = python(code, cwd=elsewhere, env=env)
    assert proc.returncode == 0, proc.stderr
    where, version = proc.stdout.split()
    assert Path(where) == target / "distcore" / "__init__.py" and version == "0.1.0"
    for command in ([sys.executable, "-m", "distcore", "--help"], [str(target / "bin" / "distcore"), "--help"]):
        proc = subprocess.run(
            command, cwd=elsewhere, capture_output=True, text=True, timeout=120, env={**os.environ, **env}
        )
        assert proc.returncode == 0, proc.stderr
        assert listed_commands(proc.stdout) == USER_COMMANDS


def listed_commands(help_text: str) -> set[str]:
    """The command names --help lists under COMMAND (each line `    name  description`)."""
    section = help_text.split("positional arguments:", 1)[1].split("options:", 1)[0]
    return {m.group(1) for m in re.finditer(r"^ {4}([a-z][a-z-]*)(?:\s|$)", section, re.M)}


def test_help_lists_only_user_commands():
    proc = subprocess.run(
        [sys.executable, "-m", "distcore", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert listed_commands(proc.stdout) == USER_COMMANDS
    assert "planner" not in proc.stdout and "multi-worker" not in proc.stdout
    assert proc.stdout.startswith("usage: python -m distcore [-h] [--version] COMMAND ...")
    split_help = subprocess.run(
        [sys.executable, "-m", "distcore", "split", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120
    ).stdout
    assert "--workers" in split_help and "--multi-worker" not in split_help


def test_the_console_command_is_python_m_distcore():
    command = Path(sys.executable).parent / "distcore"
    if not command.exists():
        pytest.skip("distcore is not installed into this environment (scripts/setup.sh installs it)")
    ours, theirs = (
        subprocess.run([*argv, "--help"], cwd="/", capture_output=True, text=True, timeout=120)
        for argv in ([str(command)], [sys.executable, "-m", "distcore"])
    )
    assert ours.returncode == theirs.returncode == 0, ours.stderr
    assert ours.stdout == theirs.stdout
    bad = subprocess.run([str(command), "no-such-command"], cwd="/", capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "invalid choice" in bad.stderr


def test_internal_entry_points_stay_callable():
    """What the app, the cluster launcher and bench run: out of --help, still taken."""
    assert cli.parse(["planner"]).command == "planner"  # the app's split-plan service (distcore.jobs)
    args = cli.parse(["split", "--examples", "8", "--global-batch", "4", "--multi-worker"])  # a worker of --workers
    assert args.multi_worker
    assert cli.parse(["train", "--run-dir", "/tmp/r", "--multi-worker"]).multi_worker  # cluster's workers
    for module in ("distcore", "distcore.bench"):
        argv = ["planner", "--help"] if module == "distcore" else ["--help"]
        proc = subprocess.run(
            [sys.executable, "-m", module, *argv], cwd=ROOT, capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 0, proc.stderr
    assert "--worker" in proc.stdout  # bench's workers: `python -m distcore.bench --worker KIND`
