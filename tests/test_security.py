"""Security: Gradio's file route serves nothing outside what the app serves; loopback by default."""

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import ROOT

SECRET = "distcore-secret-do-not-serve"
# Gradio's published path-traversal fixes (CVE-2024-1561, CVE-2024-47168, CVE-2024-47867,
# CVE-2025-23042, CVE-2025-48889, ...) all landed in releases up to 5.31; the pin is newer.
NEWEST_FIX = (5, 31, 0)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    home = tmp_path_factory.mktemp("site")
    (home / ".env").write_text(f"TOKEN={SECRET}\n")
    (home / "secret.txt").write_text(SECRET)  # a sibling of the runs root
    (home / "runs").mkdir()
    port = free_port()
    env = {**os.environ, "GRADIO_SERVER_PORT": str(port), "DISTCORE_RUNS_DIR": str(home / "runs")}
    env.pop("GRADIO_SERVER_NAME", None)
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "app.py")], cwd=home, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(240):
        try:
            urllib.request.urlopen(url, timeout=2)
            break
        except OSError:
            time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail("the app did not start")
    yield url, home, port
    proc.terminate()
    proc.wait(timeout=30)


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(errors="replace")


@pytest.mark.parametrize(
    "path",
    [
        ".env",
        "secret.txt",
        "../secret.txt",
        "runs/../secret.txt",
        "../../etc/passwd",
        "/etc/passwd",
        "..%2F..%2Fetc%2Fpasswd",
        "%2Fetc%2Fpasswd",
        "....//....//etc/passwd",
        "app.py",
        str(ROOT / "webapp" / "hosting.py"),
        str(ROOT / "webapp" / "static" / "app.js"),
    ],
)
def test_files_outside_the_app_are_refused(app, path):
    url, home, _ = app
    for target in (path, str(home / "secret.txt") if path == "secret.txt" else path):
        status, body = get(f"{url}/gradio_api/file={target}")
        assert status in (400, 403, 404), (target, status)
        assert SECRET not in body and "root:x:0:0" not in body


def test_default_bind_is_loopback(app):
    _, _, port = app
    listening = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, hex_port = local.split(":")
        if int(hex_port, 16) == port and state == "0A":  # LISTEN
            listening.append(address)
    assert listening == ["0100007F"]  # 127.0.0.1, not 0.0.0.0


def test_gradio_is_pinned_past_every_published_path_traversal_fix():
    import gradio

    pinned = [line for line in (ROOT / "requirements.txt").read_text().splitlines() if line.startswith("gradio==")]
    assert pinned == [f"gradio=={gradio.__version__}"]
    assert tuple(int(x) for x in gradio.__version__.split(".")[:3]) > NEWEST_FIX


def test_the_app_never_widens_file_access():
    for path in [ROOT / "app.py", *sorted((ROOT / "webapp").rglob("*.py"))]:
        source = path.read_text()
        assert "allowed_paths" not in source and "set_static_paths" not in source, path
