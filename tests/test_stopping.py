"""Stop requests: the signal handlers of StopFlag."""

import subprocess
import sys
import textwrap

from conftest import ROOT

# A second stop request handled at every line the first one's handler runs, its callees'
# lines too: what a Ctrl-C does to a launched worker, which gets it from the terminal and
# again from the launcher, microseconds apart. raise_signal runs the handler at once.
SECOND_REQUEST_DURING_THE_FIRST = textwrap.dedent("""
    import signal, sys
    from distcore.stopping import StopFlag

    flag = StopFlag(cluster=True).install()  # a worker: the request only sets the flag
    handler = StopFlag.on_signal.__code__

    def in_handler(frame):
        while frame is not None and frame.f_code is not handler:
            frame = frame.f_back
        return frame is not None

    def each_line(frame, event, arg):
        if event == "line":
            signal.raise_signal(signal.SIGINT)
        return each_line

    sys.settrace(lambda frame, event, arg: each_line if in_handler(frame) else None)
    signal.raise_signal(signal.SIGINT)
    sys.settrace(None)
    print("stop requested:", flag.is_set())
""")


def test_a_stop_request_handled_during_another_one_does_not_hang():
    # As a threading.Event, the flag's set took a lock, and the second handler waited for it
    # forever: one worker in ~45 runs of the Ctrl-C cluster test hung, its peer in an all-reduce.
    result = subprocess.run(
        [sys.executable, "-c", SECOND_REQUEST_DURING_THE_FIRST], cwd=ROOT, capture_output=True, text=True, timeout=30
    )
    assert (result.returncode, result.stdout) == (0, "stop requested: True\n"), result.stderr
