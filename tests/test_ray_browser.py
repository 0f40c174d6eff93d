"""A Ray run from the page, in Chromium: 2 worker processes on the Ray engine (tab 1's Engine), a
tiny run started on 2 · Train and followed to "finished", its steps advancing in the status line
and the loss plot; its run folder logs steps 1-20 once, with workers 2 in config.json. The local
Ray instance the run's driver starts listens on 127.0.0.1 only and ends with the run; the test ends
any Ray process left. Screenshots go to /tmp/distcore-screens/."""

import contextlib
import json
import os
import re
import shutil
import signal
import tempfile
import time
from pathlib import Path

import pytest
from playwright.sync_api import expect
from test_browser import loss_points, open_training_settings, page, server, shot  # noqa: F401 (fixtures)

from conftest import wait_for
from distcore import jobs, runs

pytestmark = pytest.mark.slow

RAY_PROCESS = re.compile(r"/ray/|ray::|--engine ray")  # Ray's own processes, and its driver
TRAINER = "train --multi-worker"  # a Ray worker's TensorFlow trainer (its servers are TensorFlow's)
STATUS = re.compile(r"tiny · (\w+) · step (\d+) / (\d+)")


@pytest.fixture
def ray_dir(monkeypatch):
    """A Ray temporary folder of this test's own (RAY_TMPDIR, in the app's environment and so in
    every process it starts): it marks the Ray processes this test starts, and only those."""
    folder = Path(tempfile.mkdtemp(prefix="dc-ray-", dir="/tmp"))  # short: Ray's socket paths live in it
    monkeypatch.setenv("RAY_TMPDIR", str(folder))
    for name in ("RAY_ADDRESS", "DISTCORE_RAY_ADDRESS"):  # a local Ray on loopback, joining no cluster
        monkeypatch.delenv(name, raising=False)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def app(ray_dir, server):  # noqa: F811 (ray_dir first: the app starts with its RAY_TMPDIR)
    yield server
    # Whatever happened, no Ray process of this test stays: a driver still running is stopped (it
    # shuts its Ray down), then any process left is killed. The app stops in server's own teardown.
    for pid in ray_processes(ray_dir):
        if "--engine ray" in cmdline(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
    if not wait_for(lambda: not ray_processes(ray_dir, trainers=True), timeout=30):
        for pid in ray_processes(ray_dir, trainers=True):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def cmdline(pid: int) -> str:
    return " ".join(jobs.pid_cmdline(pid))


def ray_processes(ray_dir: Path, trainers: bool = False) -> list[int]:
    """The live processes of this test's Ray (its RAY_TMPDIR in their environment), the run's driver
    among them; with `trainers`, the TensorFlow trainers its workers started too."""
    marker = f"RAY_TMPDIR={ray_dir}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or not runs.pid_alive(entry):
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        command = cmdline(int(entry))
        if marker in environ and (RAY_PROCESS.search(command) or (trainers and TRAINER in command)):
            found.append(int(entry))
    return found


def listening(pids: list[int]) -> set[tuple[str, str]]:
    """(process name, local address) of each TCP socket the processes listen on, from /proc."""
    owners = {}
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    owners[link[8:-1]] = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in owners:  # 0A: LISTEN
                found.add((owners[fields[9]], address(fields[1].split(":")[0])))
    return found


def address(hex_address: str) -> str:
    """/proc/net/tcp's address (32-bit words in host order, little-endian here) as people write it;
    IPv6's IPv4-mapped ones as IPv4."""
    words = [bytes.fromhex(hex_address[i : i + 8])[::-1] for i in range(0, len(hex_address), 8)]
    raw = b"".join(words)
    if len(raw) == 16 and raw[:12] == b"\0" * 10 + b"\xff\xff":
        raw = raw[12:]
    if len(raw) == 4:
        return ".".join(str(b) for b in raw)
    return ":".join(raw[i : i + 2].hex() for i in range(0, 16, 2))


def test_the_app_starts_a_ray_run_and_follows_it_to_the_end(app, page, ray_dir, tmp_path):  # noqa: F811
    run_dir = tmp_path / "runs" / "tiny"
    page.goto(app)
    workers = page.get_by_label("Worker processes")
    workers.fill("2")
    workers.press("Tab")
    engine = page.locator("#dc-engine")
    expect(engine).to_be_visible(timeout=30_000)  # shown with 2+ worker processes, Ray being installed
    engine.get_by_label("Ray", exact=True).check()
    shot(page, tmp_path, "ray-1-engine")

    page.get_by_role("tab", name="2 · Train").click()
    open_training_settings(page)
    for label, value in (
        ("Training examples", "512"),
        ("Test examples", "256"),
        ("Epochs", "3"),
        ("Max steps (0 = no limit)", "20"),
        ("Steps per loop", "5"),
    ):
        page.get_by_label(label, exact=True).fill(value)
        page.get_by_label(label, exact=True).press("Tab")
    expect(
        page.get_by_text(re.compile(r"^Training: cnn .* 3 epochs \(20 steps.* on 2 worker processes on Ray"))
    ).to_be_visible(timeout=10_000)
    page.get_by_label("New run name").fill("tiny")
    started = time.monotonic()
    page.get_by_role("button", name="Start training").click()
    expect(page.get_by_text(re.compile(r"Started tiny \(process \d+\) on 2 worker processes on Ray"))).to_be_visible(
        timeout=30_000
    )
    driver = jobs.launch_record(run_dir)["pid"]
    assert "train --engine ray --workers 2 --run-dir" in cmdline(driver)

    # Followed as any run: the status line and the loss plot advance to the end; meanwhile every
    # socket a Ray process listens on is on loopback.
    seen, sockets = [], set()
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:
        match = STATUS.search(page.locator("#dc-status").inner_text())
        if match:
            state, step = match.group(1), int(match.group(2))
            if not seen or seen[-1][:2] != (state, step):
                seen.append((state, step, loss_points(page)))
            if state == "finished":
                break
        sockets |= listening(ray_processes(ray_dir))
        page.wait_for_timeout(300)
    print(f"\nfollowed: {seen}; finished {time.monotonic() - started:.1f} s after Start")
    assert seen and seen[-1][:2] == ("finished", 20), seen
    assert [step for _, step, _ in seen] == sorted(step for _, step, _ in seen)  # never back
    assert [s for s in seen if s[0] in ("starting", "running") and s[1] < 20], seen  # followed while it trained
    expect(page.get_by_text(re.compile(r"Checkpoints: .*ckpt-20"))).to_be_visible(timeout=10_000)
    expect(page.get_by_text(re.compile(r"Setup: .* on 2 worker processes on Ray \(cpu:0 each\)"))).to_be_visible()
    wait_for(lambda: loss_points(page) == 20, timeout=10)
    assert loss_points(page) == 20
    assert {"gcs_server", "raylet"} <= {name for name, _ in sockets}, sockets  # (seen while it ran)
    assert {where for _, where in sockets} == {"127.0.0.1"}, sockets
    shot(page, tmp_path, "ray-2-finished")

    # The run folder: each step once, the workers in its settings; the driver's output in its log.
    steps = [r["step"] for r in runs.read_metrics(run_dir) if "loss" in r and "step" in r]
    assert steps == list(range(1, 21))
    assert json.loads((run_dir / "config.json").read_text())["workers"] == 2
    assert "$ distcore train --engine ray --workers 2" in (run_dir / jobs.LOG_FILE).read_text()
    # The driver stops its local Ray as it ends: no raylet, gcs_server or worker of it stays.
    assert wait_for(lambda: not runs.pid_alive(driver), timeout=60)
    assert wait_for(lambda: not ray_processes(ray_dir, trainers=True), timeout=20), [
        cmdline(pid) for pid in ray_processes(ray_dir, trainers=True)
    ]
