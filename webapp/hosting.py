"""Hosting workarounds: what serving the app on a shared host, in a container and under the pinned
Gradio needs beyond the page itself.

Gradio is imported lazily here: `prepare_environment` runs before Gradio's import, which reads
GRADIO_SERVER_PORT and GRADIO_TEMP_DIR as it loads. The patches in `patch_gradio` are written for
GRADIO_VERSION; tests/test_hosting.py fails when the installed Gradio differs or the patched
functions change shape, so a Gradio upgrade re-examines each one.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import inspect
import os
import signal
import socket
import sys
import tempfile
from pathlib import Path

from distcore import jobs, settings as env
from distcore.config import DistcoreError, check_int

GRADIO_VERSION = "6.31.0"  # the Gradio the patches below are written for (requirements.txt pins it)

# Gradio keeps each session's component values (figures included) in memory for as long as the
# app runs, closed pages too, up to its default of 10,000 sessions. It drops the least recently
# used beyond this many; an open page's timer keeps its session recent.
SESSIONS_KEPT = 64
M_MMAP_THRESHOLD = -3  # glibc's malloc.h
STOP_WAIT_SECONDS = 600  # beyond the 8 s any run gets, for a run in a long loop: the supervisor's grace decides


def server_port() -> int:
    return check_int("GRADIO_SERVER_PORT", env.get("GRADIO_SERVER_PORT"), low=1, high=65535)


def gradio_temp_dir() -> str | None:
    """A folder of this user's own for Gradio's files when its default is another user's; None
    keeps the default. The first Gradio app on a host makes /tmp/gradio (mode 0755), which no
    other user's app can write: its every Evaluate and Export would fail with a bare "Error"."""
    if env.get("GRADIO_TEMP_DIR"):
        return None
    try:
        tmp = Path(tempfile.gettempdir())
    except FileNotFoundError as err:  # Gradio's own import would fail on it with a traceback
        raise DistcoreError(
            f"{err}. Gradio keeps its files in a temporary folder: set TMPDIR to a folder you "
            "can write (with a read-only root filesystem, mount one at /tmp)."
        ) from None
    shared = tmp / "gradio"
    return str(tmp / f"gradio-{os.getuid()}") if shared.exists() and not os.access(shared, os.W_OK | os.X_OK) else None


def prepare_environment() -> None:
    """Before Gradio is imported: a port Gradio can read, and a temporary folder it can write."""
    server_port()
    own_temp = gradio_temp_dir()
    if own_temp:
        os.environ["GRADIO_TEMP_DIR"] = own_temp


def check_port_free(host: str, port: int) -> None:
    """DistcoreError, in one plain sentence, if (host, port) cannot be listened on."""
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server will
            s.bind((host.strip("[]"), port))
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise DistcoreError(
                f"port {port} on {host} is already in use; stop whatever "
                "uses it or set GRADIO_SERVER_PORT to a free port."
            ) from None
        raise DistcoreError(
            f"cannot listen on {host}:{port} ({e.strerror or e}); check GRADIO_SERVER_NAME and GRADIO_SERVER_PORT."
        ) from None


# ---------------------------------------------------------------- Gradio 6.31 patches


def radio_preprocess_taking_numbers_as_text(preprocess):
    """A Radio of whole numbers takes them as text too. gradio_client's view_api lists every
    Radio's choices as text (the device count as Literal['1', ..., '16']), and Gradio refuses
    "3" as "not in the list of choices". Patched on the class: Gradio rebuilds a session's
    component from its arguments when an event updates it, and writes a .pyi file beside any
    module that subclasses one."""

    def taking_text(self, payload):
        if (
            isinstance(payload, str)
            and payload.strip().isdigit()
            and all(type(value) is int for _, value in self.choices)
        ):
            payload = int(payload)
        return preprocess(self, payload)

    taking_text.wrapped = preprocess
    return taking_text


def session_copies_keeping_their_ids(setitem):
    """A session's copy of a component keeps the id of the component it stands for. Gradio 6.31
    rebuilds that copy, with a new id, whenever an event updates it (a gr.skip() too), and the
    next event taking it as input files it under the new id as well (Blocks.preprocess_data:
    `if block._id not in state`): without this, every timer tick of an open page keeps one more
    component per picker, about 25 KB a poll, for as long as the app runs."""

    def keeping_ids(self, key, value):
        from gradio.blocks import Block

        if isinstance(value, Block) and value._id != key:
            value._id = key
        return setitem(self, key, value)

    keeping_ids.wrapped = setitem
    return keeping_ids


def patch_gradio() -> None:
    """Apply the patches once, however often this runs."""
    import gradio as gr
    from gradio.state_holder import SessionState

    if not hasattr(gr.Radio.preprocess, "wrapped"):
        gr.Radio.preprocess = radio_preprocess_taking_numbers_as_text(gr.Radio.preprocess)
    if not hasattr(SessionState.__setitem__, "wrapped"):
        SessionState.__setitem__ = session_copies_keeping_their_ids(SessionState.__setitem__)


def patched_shapes() -> dict:
    """The signatures of the functions the patches wrap, unwrapped, for the version test."""
    import gradio as gr
    from gradio.state_holder import SessionState

    def original(fn):
        return getattr(fn, "wrapped", fn)

    return {
        "Radio.preprocess": str(inspect.signature(original(gr.Radio.preprocess))),
        "SessionState.__setitem__": str(inspect.signature(original(SessionState.__setitem__))),
    }


def gradio_room(nbytes: int) -> str | None:
    """Why Gradio's temporary folder cannot take `nbytes` more, or None. Gradio copies the files
    of an answer (exports, gallery images) there as it answers, outside this code, and on a full
    disk it fails the whole answer with a bare "Error" on each output: asking first lets the
    page say why."""
    from gradio import utils as gradio_utils

    folder = Path(gradio_utils.get_upload_folder())
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder) as probe:
            probe.write(bytes(nbytes + 65536))  # with room for Gradio's own folders
            probe.flush()
    except OSError as e:
        return f"Gradio's temporary folder {folder} cannot take them ({e.strerror or e})."
    return None


# ---------------------------------------------------------------- the process


def keep_large_blocks_off_the_heap() -> None:
    """Have glibc map every block of 128 KiB or more on its own, and unmap it when freed.

    glibc raises that threshold to the size of each large block freed (up to 32 MiB), so later
    large blocks (an evaluation's 7.8 MB test set, read for its gallery) come from the heaps of
    Gradio's worker threads and stay there, fragmented: the app grows by megabytes a visit.
    A fixed threshold keeps its size flat."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt(M_MMAP_THRESHOLD, 128 * 1024)
    except (OSError, AttributeError):
        pass  # not glibc (musl, macOS), whose allocators work otherwise


def leave_stopping_own_runs(root: Path) -> None:
    """SIGTERM (`docker stop`, a Space's restart, a service manager): the container's end takes
    this app's trainings with it, so they stop first, each with a checkpoint. Ctrl-C leaves
    them training, to be followed again by the next app on this runs folder."""
    print(
        "distcore app: SIGTERM, stopping the runs this app started (each saves a checkpoint) ...",
        file=sys.stderr,
        flush=True,
    )
    stopped, going = jobs.stop_own_runs(root)
    done = ", ".join(stopped) if stopped else "no runs"
    if not going:
        print(f"distcore app: stopped {done}; leaving.", file=sys.stderr, flush=True)
        raise SystemExit(128 + signal.SIGTERM)
    # Runs whose loop of steps is longer (Steps per loop, a loaded machine) are waited for: as
    # PID 1, leaving now would end the container, and them with it; the supervisor's grace decides.
    print(
        f"distcore app: stopped {done}; still finishing their loop of steps: {', '.join(going)}; waiting "
        "for them before leaving (if the container is killed first, they lose the steps since their "
        "last checkpoint).",
        file=sys.stderr,
        flush=True,
    )
    late = [name for name in going if not jobs.wait_until_done(root / name, timeout=STOP_WAIT_SECONDS)]
    outcome = f"still training after {STOP_WAIT_SECONDS} s: {', '.join(late)}" if late else "they stopped"
    print(f"distcore app: {outcome}; leaving.", file=sys.stderr, flush=True)
    raise SystemExit(128 + signal.SIGTERM)
