"""distcore web app: set up, watch and check tf.distribute training from a browser.

The entry point (`python app.py`, Hugging Face Spaces' app_file): it builds the page from the
`webapp` package and serves it. Every number shown comes from distcore, and all TensorFlow work
runs in `python -m distcore ...` subprocesses, so this process never imports TensorFlow.

It serves on 127.0.0.1:7860. GRADIO_SERVER_NAME and GRADIO_SERVER_PORT override that (containers
set GRADIO_SERVER_NAME=0.0.0.0). DISTCORE_RUNS_DIR picks the runs folder, DISTCORE_MAX_JOBS the
number of training jobs allowed at once (default 2).
"""

from __future__ import annotations

import signal
import sys
import threading

from distcore.config import DistcoreError
from webapp import hosting

if __name__ == "__main__":  # before Gradio's import, which reads GRADIO_SERVER_PORT and GRADIO_TEMP_DIR
    try:
        hosting.prepare_environment()
    except DistcoreError as e:
        sys.exit(f"error: {e}")

from distcore import forms, jobs, runs, settings as env  # noqa: E402
from webapp.settings import env_max_jobs  # noqa: E402
from webapp.shell import build_app, launch  # noqa: E402

__all__ = ["build_app", "main"]


def main() -> None:
    host = env.get("GRADIO_SERVER_NAME")
    try:  # before the slow start-up (device detection), and without a traceback
        port = hosting.server_port()
        hosting.check_port_free(host, port)
        max_jobs, root = env_max_jobs(), runs.ready_root()
        forms.make_offer(root)  # DISTCORE_MODELS, DISTCORE_TASKS and DISTCORE_MAX_UPLOAD_MB, checked
    except DistcoreError as e:
        sys.exit(f"error: {e}")
    hosting.keep_large_blocks_off_the_heap()
    signal.signal(signal.SIGTERM, lambda signum, frame: hosting.leave_stopping_own_runs(root))
    demo = build_app(root, max_jobs)
    # Warm the split planner up in the background so the first "Show split" is quick.
    threading.Thread(target=warm_up, args=(demo.planner,), daemon=True).start()
    try:
        launch(demo, host, port)
    except OSError as e:  # the port was taken after the check above
        sys.exit(f"error: cannot serve on {host}:{port}: {e}")
    finally:
        demo.planner.close()


def warm_up(planner: jobs.Planner) -> None:
    try:
        planner.start()
    except DistcoreError:
        pass  # the first "Show split" retries and shows the message


if __name__ == "__main__":
    main()
