"""Every environment variable distcore and its app read: name, default, meaning.

This list is the one place a setting is declared; code reads a setting with `get(name)`,
and docs/settings.md's table names the same variables (tests/test_settings.py checks both).
Variables distcore only sets or extends for its own child processes are not settings and
are listed in INTERNAL instead. No TensorFlow here: the app and the CLI's launcher import this.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Setting:
    """One environment variable: its name, the value `get` gives when it is unset (None: the
    code that reads it works the default out, as `meaning` says), and what it changes."""

    name: str
    default: str | None
    meaning: str


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "DISTCORE_RUNS_DIR",
        None,
        "the runs folder: one sub-folder per run (unset: /data/runs on Hugging Face Spaces when /data "
        "exists, else ./runs)",
    ),
    Setting(
        "DISTCORE_DATA_DIR",
        None,
        "a folder holding Fashion-MNIST's four .gz files, looked in first (unset: Keras's cache, then "
        "Debian's dataset-fashion-mnist)",
    ),
    Setting(
        "DISTCORE_NO_DOWNLOAD",
        "0",
        "1 (any value but empty or 0): never download Fashion-MNIST with Keras when no folder has it",
    ),
    Setting(
        "DISTCORE_CACHE_DIR",
        None,
        "the folder for the FILE policy's TFRecord shards (unset: ~/.cache/distcore, or a folder of "
        "the user's own in the temporary folder when there is no home)",
    ),
    Setting("DISTCORE_MAX_JOBS", "2", "training jobs the app runs at once (1 or more)"),
    Setting(
        "DISTCORE_MODELS",
        "",
        "Keras models the app offers besides cnn and mlp: name=module:function, comma-separated; each "
        "function returns an uncompiled Keras model, and its module is importable by the training process",
    ),
    Setting(
        "DISTCORE_TASKS",
        "",
        "tasks the app offers besides classifier and gan: name=module:function, comma-separated; each "
        "function returns a distcore.Task, and its module is importable by the training process",
    ),
    Setting("DISTCORE_MAX_UPLOAD_MB", "200", "the largest .npz file the app takes as an upload, in MB (1 or more)"),
    Setting(
        "DISTCORE_RAY_ADDRESS",
        "",
        "the Ray cluster the app's Ray runs join (`train --engine ray --ray-address`); empty: each Ray run "
        "starts a local Ray instance on 127.0.0.1 and stops it when the run ends",
    ),
    Setting(
        "GRADIO_SERVER_NAME",
        "127.0.0.1",
        "the address the app listens on (0.0.0.0: every interface, as in a container)",
    ),
    Setting("GRADIO_SERVER_PORT", "7860", "the port the app listens on (1-65535)"),
    Setting(
        "GRADIO_TEMP_DIR",
        None,
        "Gradio's folder for uploads and downloads (unset: Gradio's default, or a folder of the "
        "user's own when another user's app made the default)",
    ),
    Setting(
        "TF_CONFIG",
        None,
        "TensorFlow's cluster description (JSON) for `train --multi-worker` and `split --multi-worker`: "
        "the workers' addresses and this worker's index",
    ),
    Setting(
        "TF_NUM_INTRAOP_THREADS",
        None,
        "threads per TensorFlow op, a whole number (unset: distcore gives each CPU replica its share "
        "of the cores; 0: TensorFlow's default)",
    ),
    Setting(
        "TF_NUM_INTEROP_THREADS",
        None,
        "threads running TensorFlow ops side by side, a whole number (unset or 0: TensorFlow's default)",
    ),
    Setting(
        "TF_CPP_MIN_LOG_LEVEL",
        None,
        "TensorFlow's C++ log level (unset: distcore uses 1 for split and planner, whose plans show "
        "TensorFlow's warnings, and 2, errors only, elsewhere)",
    ),
    Setting(
        "TF_ENABLE_ONEDNN_OPTS",
        None,
        "TensorFlow's oneDNN kernels on x86 (0: off); bench records it in its report (unset: TensorFlow's default, on)",
    ),
    Setting(
        "KERAS_HOME", None, "Keras's folder, where a Fashion-MNIST download is kept and looked for (unset: ~/.keras)"
    ),
    Setting(
        "SPACE_ID",
        None,
        "set by Hugging Face Spaces: with a /data folder there, the runs folder defaults to /data/runs",
    ),
)

# Variables distcore sets, or extends, only for its own child processes: not settings.
INTERNAL: tuple[Setting, ...] = (
    Setting(
        "DISTCORE_LAUNCHED_WORKER", None, "set by `cluster` in its workers: the launcher stops stuck workers itself"
    ),
    Setting(
        "PYTHONPATH",
        None,
        "extended with distcore's folder for the processes distcore starts, so they import the same copy",
    ),
    Setting(
        "TF_USE_LEGACY_KERAS",
        None,
        "set to 1 by Ray in its workers; `--engine ray` gives its trainer the driver's value, so Keras 3 stays",
    ),
    Setting(
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER",
        None,
        "set to 0 by `--engine ray` without `--ray-address`, before Ray is imported: the local Ray instance "
        "then advertises and binds 127.0.0.1 only",
    ),
    Setting(
        "OMP_NUM_THREADS",
        None,
        "set to 1 by Ray in its workers; `--engine ray` gives its trainer the driver's value",
    ),
)

_BY_NAME = {setting.name: setting for setting in SETTINGS}


def get(name: str) -> str | None:
    """The environment's value of setting `name` (even an empty one), else its declared default.

    A name that is not in SETTINGS is a KeyError: every setting is declared here first.
    """
    try:
        setting = _BY_NAME[name]
    except KeyError:
        raise KeyError(f"{name} is not a declared setting (distcore.settings.SETTINGS)") from None
    return os.environ.get(name, setting.default)
