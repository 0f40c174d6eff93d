"""Run `python -m distcore ARGS`, but SIGKILL this process in the middle of the first
checkpoint save at or after step $KILL_AT_STEP: as soon as TensorFlow's temporary
checkpoint files appear, before the save completes. Fault injection for the tests."""

import os
import signal
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from distcore import checkpoints, cli  # noqa: E402

KILL_AT = int(os.environ["KILL_AT_STEP"])
original_save = checkpoints.Saver.save


def watch(folder: Path):
    while True:
        if any("_temp" in p.name for p in folder.iterdir()):
            os.kill(os.getpid(), signal.SIGKILL)


def killing_save(self, step):
    if step >= KILL_AT:
        threading.Thread(target=watch, args=(self.folder,), daemon=True).start()
    return original_save(self, step)


checkpoints.Saver.save = killing_save
sys.exit(cli.main(sys.argv[1:]))
