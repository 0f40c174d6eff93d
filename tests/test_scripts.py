"""The set-up script's own checks (scripts/setup.sh), run on a copy of it."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("version_to", ["stdout", "stderr"])  # Python 2 prints `-V` to stderr
def test_setup_names_an_interpreter_too_old_and_its_version(tmp_path, version_to):
    shutil.copytree(ROOT / "scripts", tmp_path / "scripts")
    (tmp_path / "requirements.txt").write_text("")
    old = tmp_path / "python-old"
    redirect = ">&2" if version_to == "stderr" else ""
    old.write_text(f'#!/bin/sh\n[ "$1" = -V ] && echo "Python 2.7.18" {redirect} && exit 0\nexit 1\n')
    old.chmod(0o755)
    proc = subprocess.run(
        ["bash", "scripts/setup.sh"],
        cwd=tmp_path,
        env={**os.environ, "PYTHON": str(old)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1 and not (tmp_path / ".venv").exists()
    assert proc.stderr.startswith(f"setup: {old} is Python 2.7.18; distcore needs Python 3.11 or later."), proc.stderr


def test_setup_says_when_the_interpreter_is_missing(tmp_path):
    shutil.copytree(ROOT / "scripts", tmp_path / "scripts")
    shim = tmp_path / "python2"  # what pyenv puts on PATH for a Python it does not have
    shim.write_text('#!/bin/sh\necho "pyenv: python2: command not found" >&2\nexit 127\n')
    shim.chmod(0o755)
    for python in ("no-such-python", str(shim)):
        proc = subprocess.run(
            ["bash", "scripts/setup.sh"],
            cwd=tmp_path,
            env={**os.environ, "PYTHON": python},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 1 and proc.stderr.startswith(f"setup: {python} is missing;"), proc.stderr
