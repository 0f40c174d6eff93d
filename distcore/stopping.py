"""Stop requests (SIGTERM, SIGINT, "Stop training"), honoured without TensorFlow.

Before training begins there is nothing to save, so a stop request ends the
process at once (even in the middle of importing TensorFlow) and marks the run
stopped. Once the loop runs, a request only sets a flag: the outer loop sees it
between chunks of steps, saves a checkpoint and exits cleanly. A worker of a
cluster only ever sets the flag (see StopFlag), unless it is asked twice while it
still waits for its peers to connect (StopFlag.while_connecting).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from . import runs
from .config import DistcoreError

# Set by the cluster launcher in its workers' environment: it stops stuck workers itself.
LAUNCHED_ENV = "DISTCORE_LAUNCHED_WORKER"
# Signals this close together are one request (a Ctrl-C can reach a worker twice: from
# the terminal, and through a wrapper script that passes signals on).
SAME_REQUEST_SECONDS = 0.5
# When a worker still waiting for its peers says again what may be wrong: after a minute, then
# every five. TensorFlow's start-up barrier has no end of its own (a peer never started, a
# mistyped address, workers given different worker lists).
REMIND_SECONDS = (60, 300)
BEFORE_TRAINING = "stopped before training began"
# The stop requests: handled here, passed on by the cluster launcher. SIGHUP is a closed
# terminal: by default it ends a run at once, with no checkpoint and its status left "running".
STOPS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class StopSignal(KeyboardInterrupt):
    """A stop request by a signal that is not Ctrl-C (SIGTERM, SIGHUP), taking Ctrl-C's way
    out of a command: the CLI names it, rather than "stopped (Ctrl-C)." for all."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def exit_status(signum: int | None) -> int:
    """A command's status after a stop request by signal `signum` (None: no signal): 128 +
    signum, as the shell reports a process the signal ended (130 for Ctrl-C), so a script's
    `set -e` or `&&` does not go on as if it had finished (exit 0)."""
    return 0 if signum is None else 128 + signum


def interruption(signum: int) -> KeyboardInterrupt:
    """What a stop request raises in a command that stops by exception."""
    return KeyboardInterrupt() if signum == signal.SIGINT else StopSignal(signum)


@contextlib.contextmanager
def handling(signals, handler):
    """`handler` for `signals` meanwhile, then the handlers they had (main thread only)."""
    previous = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield
    finally:
        for sig, earlier in previous.items():
            signal.signal(sig, earlier)


# How autograph names the module of each function it converts (tensorflow/python/autograph/pyct/loader.py).
AUTOGRAPH_MODULE_PREFIX = "__autograph_generated_file"


class StopFlag:
    """A request to stop training, checked by the Controller between loops of steps.

    A library caller passes one to `Controller(..., stop=flag)` and calls `flag.set()`
    from any thread. The CLI also `install`s it as the process's handler of STOPS, and
    gives it the run directory, so a request before training ends the process at once.
    """

    def __init__(self, run_dir=None, cluster: bool = False):
        # A plain attribute, not a threading.Event: it is set from signal handlers, and
        # Event.set takes a lock. A Ctrl-C reaches a launched worker twice (from the terminal,
        # and passed on by the launcher); the second handler can run while the first holds
        # that lock, and would wait for it forever, its peers in the next all-reduce.
        self._requested = False
        self.signum = None  # the first stop signal (install's handler), for exit_status
        self.run_dir = Path(run_dir) if run_dir else None
        # Set by the outer loop when the first step is about to run. A worker of a cluster
        # never leaves alone, not even before training: its peers may already wait for it
        # in TensorFlow's start-up barrier or first all-reduce, and would hang. Its stop
        # waits for the workers' agreement before the first chunk (they all stop at step 0);
        # only a second request while it still waits for them ends it alone (while_connecting).
        self.training = self.cluster = cluster
        self.announced_over = None  # the status announce() replaced, for withdraw()
        self.resuming = False

    def set(self) -> None:
        """Ask the training to stop at the end of its current loop, with a checkpoint (from
        any thread). Before training begins, it stops there, at step 0."""
        self._requested = True

    def on_signal(self, signum, _frame) -> None:
        """The handler `install` puts in place: before training, the process ends at once."""
        self.signum = signum if self.signum is None else self.signum
        self._requested = True
        if not self.training and self.run_dir is not None:
            self.exit_before_training()

    def is_set(self) -> bool:
        return self._requested

    def exit_status(self) -> int:
        """The process's status once stopped: see `exit_status`. 0 for a worker of a cluster:
        its peers stop with it, most without a signal of their own, and every worker must end
        alike (a Kubernetes job would restart only the one a node drain stopped, to wait for
        peers that had left; the cluster launcher reports the stop itself)."""
        return 0 if self.cluster else exit_status(self.signum)

    def install(self):
        for sig in STOPS:
            signal.signal(sig, self.on_signal)
        if threading.current_thread() is threading.main_thread():  # (the wakeup fd can be set only there)
            self.notice_at_once()
        # The cluster launcher starts its workers with these blocked (cluster.held_stops): one
        # that came before this handler was in place is delivered to it now.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)
        return self

    def notice_at_once(self) -> None:
        """Say on stderr, as each stop request comes, what happens now. Python runs a signal's
        handler only between the main thread's bytecodes, and that thread waits in TensorFlow's
        call for a whole loop of steps: a Ctrl-C would go unanswered for as long as the loop
        takes, and a second one would seem ignored. The C handler writes each signal to the wakeup fd
        at once, and a thread reads it there (TensorFlow lets go of the GIL while it trains)."""
        read_end, write_end = os.pipe()
        os.set_blocking(write_end, False)
        signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
        threading.Thread(target=self.notices, args=(read_end,), daemon=True, name="distcore-stop-notices").start()

    def notices(self, read_end: int) -> None:
        requests = Requests()
        with os.fdopen(read_end, "rb", buffering=0) as pipe:
            while signums := pipe.read(64):
                for signum in signums:
                    if signum not in STOPS or not self.training:  # (before training it ends at once)
                        continue
                    kind = requests.arrive()
                    if kind == FIRST:
                        # Its arrival order: the handlers of signals that waited for TensorFlow's
                        # call run in the order of their numbers (a Ctrl-C after a SIGTERM would make it 130).
                        self.signum = signum
                        os.write(2, b"\ndistcore: stopping at the end of this loop of steps, with a checkpoint.\n")
                    elif kind == AGAIN:
                        os.write(
                            2,
                            b"\ndistcore: already stopping: the loop of steps in progress ends first "
                            b"(kill -KILL leaves at once, losing the steps since the last checkpoint).\n",
                        )

    def announce(self, resume: bool, total_steps: int | None = None) -> None:
        """Write a 'starting' status naming this process, so it can be stopped from now on
        (not over another run's status: a new run into a used directory is refused later; one
        whose run never trained is not, runs.never_trained).
        A resume keeps the step it resumes from, with its own total: with the previous process's
        total it would read "starting · step 938 / 938" under a full bar until training begins."""
        if self.run_dir is None or not self.run_dir.is_dir():
            return
        self.resuming = resume
        if resume or not (self.run_dir / "config.json").exists() or runs.never_trained(self.run_dir):
            self.announced_over = runs.read_status(self.run_dir)
            status = self.announced_over or {}
            write_status(
                self.run_dir,
                {**status, "state": "starting", "pid": os.getpid(), "message": "", "total_steps": total_steps},
            )

    def status_before(self, run_dir: Path) -> dict | None:
        """The run's status before this process: the one announce() replaced, if it did."""
        status = runs.read_status(run_dir)
        if self.announced_over and status and status.get("pid") == os.getpid():
            return self.announced_over
        return status

    def stopped_before_training(self) -> None:
        """A stop before training began: a resume leaves the run as it was (its config.json is
        written only when training begins), a new run reads "stopped before training began"."""
        if self.resuming and self.announced_over:
            self.withdraw()
        else:
            mark_state(self.run_dir, os.getpid(), "stopped", BEFORE_TRAINING)

    def withdraw(self) -> None:
        """Put back the status `announce` replaced: the flags were refused before anything was
        done (a resume refused for --replicas 17 leaves a finished run "finished", not "failed")."""
        if self.announced_over:
            put_status_back(self.run_dir, os.getpid(), self.announced_over)

    def refused(self, message: str, resume: bool) -> None:
        """The flags were refused before anything was done: a resume leaves the run as it was,
        a new run says it failed."""
        if resume:
            self.withdraw()
        else:
            self.failed(message)

    def failed(self, message: str) -> None:
        """The set-up failed before training began: say so where the app looks."""
        mark_state(self.run_dir, os.getpid(), "failed", message, only_from="starting")

    @contextlib.contextmanager
    def interrupts(self):
        """Around the training loop of a library caller: Ctrl-C (a notebook's interrupt) stops
        it as the CLI's does, at the end of the current loop with a checkpoint, rather than
        raise KeyboardInterrupt inside the loop, which would lose the steps since the last
        checkpoint and mark the run failed. A second Ctrl-C interrupts at once. Not where a handler of
        someone else's is in place (the CLI's is this flag's own), nor off the main thread."""
        if (
            threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
        ):
            yield
            return

        def interrupt(signum, frame):
            if self.is_set():
                signal.default_int_handler(signum, frame)  # raises KeyboardInterrupt
            self.set()
            os.write(2, b"Stopping at the end of this loop, with a checkpoint; Ctrl-C again interrupts at once.\n")

        previous = signal.signal(signal.SIGINT, interrupt)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)

    def exit_before_training(self) -> None:
        self.stopped_before_training()
        os.write(2, f"{BEFORE_TRAINING}: nothing to save.\n".encode())  # (print could re-enter a write)
        remove_autograph_files()  # the input pipeline's map functions may be converted already
        os._exit(self.exit_status())  # nothing trained yet, nothing to save: do not wait for TensorFlow

    @contextlib.contextmanager
    def while_connecting(self, announce: str = "", remind: str = "", put_back: dict | None = None):
        """Around a cluster worker's wait for its peers in TensorFlow's start-up barrier.

        No Python code runs there: TensorFlow holds the GIL until every worker has
        connected, which may be never (a peer not started, a wrong address), so the
        worker's own signal handlers wait too. Python's C signal handler still writes each
        signal to the wakeup fd, and a small watcher process reads it. A first stop request
        keeps its meaning (every worker stops at step 0 once all have connected), and the
        watcher says so; a second one ends the worker at once (SIGKILL: nothing else gets
        through), as before training anywhere. The other workers then wait for it, as for
        a worker never started. Workers of the cluster launcher need none of this: it
        stops stuck workers itself. `announce` is printed to stderr once the watcher is up:
        a waiting worker is otherwise silent on its terminal, for as long as it waits. The
        watcher prints `remind` after REMIND_SECONDS of waiting, with the time waited. A resume
        gives `put_back`, the run's status before it: a worker ended then leaves the run as it was.
        """
        if os.environ.get(LAUNCHED_ENV) or threading.current_thread() is not threading.main_thread():
            yield  # (the wakeup fd can only be set from the main thread)
            return
        read_end, write_end = os.pipe()
        os.set_blocking(write_end, False)
        previous = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)  # the pipe keeps them meanwhile
        package_parent = str(Path(__file__).resolve().parent.parent)
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [package_parent, os.environ.get("PYTHONPATH")])),
        }
        watcher = None
        try:
            watcher = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "distcore.stopping",
                    str(read_end),
                    str(os.getpid()),
                    str(self.run_dir or ""),
                    remind,
                    *map(str, REMIND_SECONDS),
                    json.dumps(put_back),
                ],
                pass_fds=(read_end,),
                start_new_session=True,
                env=env,
            )  # its own session: no Ctrl-C of its own
            if announce:
                print(announce, file=sys.stderr, flush=True)
            yield
        finally:
            signal.set_wakeup_fd(previous)
            os.close(write_end)  # the watcher reads the end of the pipe and leaves
            os.close(read_end)
            if watcher is not None:
                watcher.wait()


def remove_autograph_files() -> None:
    """Remove the source files autograph wrote for this process's converted functions.

    Autograph writes each one to the temporary folder and removes it in an atexit handler,
    which a process that leaves with os._exit skips: each `python -m distcore train` would
    leave 7 files in /tmp, thousands in a day of runs. Their modules stay in sys.modules.
    """
    for name, module in list(sys.modules.items()):
        if name.startswith(AUTOGRAPH_MODULE_PREFIX):
            with contextlib.suppress(OSError, TypeError, AttributeError):
                os.remove(module.__file__)


def write_status(run_dir: Path, status: dict) -> None:
    try:
        runs.write_status(run_dir, {**status, "time": time.time()})
    except DistcoreError:
        pass  # an unwritable run directory is reported, clearly, by whoever writes next


def mark_state(run_dir: Path | None, pid: int, state: str, message: str, only_from: str | None = None) -> None:
    """Set the run's state, if its status names process `pid` (a worker's names the chief)
    and, with `only_from`, is in that state."""
    status = runs.read_status(run_dir) if run_dir is not None else None
    if status is None or status.get("pid") != pid or only_from not in (None, status.get("state")):
        return
    write_status(run_dir, {**status, "state": state, "message": message})


def put_status_back(run_dir: Path | None, pid: int, before: dict) -> None:
    """Write `before` over a "starting" status of process `pid`, which then did nothing."""
    status = runs.read_status(run_dir) if run_dir is not None else None
    if status and status.get("pid") == pid and status.get("state") == "starting":
        with contextlib.suppress(DistcoreError):
            runs.write_status(run_dir, before)


FIRST, AGAIN = "first", "again"


class Requests:
    """Stop requests as they arrive: the first, then each one later than SAME_REQUEST_SECONDS
    after it (None for a copy of the first, as a launcher's of a Ctrl-C)."""

    def __init__(self):
        self.first = None

    def arrive(self) -> str | None:
        now = time.monotonic()
        if self.first is None:
            self.first = now
            return FIRST
        return AGAIN if now - self.first > SAME_REQUEST_SECONDS else None


def watch_while_connecting(
    read_end: int,
    pid: int,
    run_dir: Path | None,
    remind: str = "",
    remind_seconds: tuple[float, float] = REMIND_SECONDS,
    put_back: dict | None = None,
) -> None:
    """The watcher process of StopFlag.while_connecting: reads worker `pid`'s signals until
    the worker closes the pipe (it connected, or failed), and says `remind` now and then."""
    requests, began = Requests(), time.monotonic()
    next_reminder = began + remind_seconds[0]
    with os.fdopen(read_end, "rb", buffering=0) as pipe:
        while True:
            if not select.select([pipe], [], [], max(0.0, next_reminder - time.monotonic()))[0]:
                if remind:
                    print(f"{remind} (waiting for {waited(time.monotonic() - began)})", file=sys.stderr, flush=True)
                next_reminder += remind_seconds[1]
                continue
            signums = pipe.read(64)
            if not signums:
                return
            if not any(s in STOPS for s in signums):
                continue
            kind = requests.arrive()
            if kind == FIRST:
                print(
                    "distcore: asked to stop while waiting for the cluster's other workers to connect. "
                    "Every worker stops at step 0 once all have connected; ask again to leave now "
                    "(the others will then wait for this one).",
                    file=sys.stderr,
                    flush=True,
                )
            elif kind == AGAIN:
                if put_back:  # a resume: as it was, beside its config.json (written when training begins)
                    put_status_back(run_dir, pid, put_back)
                else:
                    mark_state(
                        run_dir, pid, "stopped", BEFORE_TRAINING + " (while waiting for the other workers to connect)"
                    )
                print("distcore: leaving now; the other workers will wait for this one.", file=sys.stderr, flush=True)
                os.kill(pid, signal.SIGKILL)
                return


def waited(seconds: float) -> str:
    """'45 s', '3 min', '2 h 5 min'."""
    minutes = int(seconds // 60)
    if minutes < 1:
        return f"{seconds:.0f} s"
    return f"{minutes // 60} h {minutes % 60} min" if minutes >= 60 else f"{minutes} min"


if __name__ == "__main__":
    watch_while_connecting(
        int(sys.argv[1]),
        int(sys.argv[2]),
        Path(sys.argv[3]) if sys.argv[3] else None,
        sys.argv[4],
        (float(sys.argv[5]), float(sys.argv[6])),
        json.loads(sys.argv[7]),
    )
