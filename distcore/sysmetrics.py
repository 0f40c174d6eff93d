"""System metrics of a training process: its CPU use and resident memory, and the GPUs' where
there are any, sampled every few seconds by a daemon thread.

    RUN/system.jsonl   one record per sample: {"time", "elapsed", "cpu_percent", "rss_bytes",
                       and where GPUs report them "gpu_util", "gpu_mem_bytes"}

`cpu_percent` is this process's CPU time over the interval, in % of one core (200 is two
cores busy). The same values go to the run's TensorBoard event files under `system/`, at the
training step of the sample. Of a multi-worker run, the chief records (it writes the run
folder). psutil reads /proc; no TensorFlow is imported here: GPU memory is asked of a
TensorFlow the process has already loaded.
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

FILE = "system.jsonl"
INTERVAL = 2.0  # seconds between samples: a curve point per poll of the app, at ~0.01% of a core
NVIDIA_SMI_TIMEOUT = 2.0


def nvidia_gpus() -> dict:
    """GPU utilisation (% summed over the GPUs, as cpu_percent sums cores) and memory in use, from
    nvidia-smi when it is installed; {} otherwise or when it fails."""
    tool = shutil.which("nvidia-smi")
    if not tool:
        return {}
    try:
        out = subprocess.run(
            [tool, "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=NVIDIA_SMI_TIMEOUT,
            check=True,
        ).stdout
        rows = [[float(x) for x in line.split(",")] for line in out.splitlines() if line.strip()]
    except (OSError, subprocess.SubprocessError, ValueError):
        return {}
    if not rows:
        return {}
    return {"gpu_util": sum(r[0] for r in rows), "gpu_mem_bytes": int(sum(r[1] for r in rows) * 2**20)}


def tensorflow_gpus() -> dict:
    """GPU memory this process holds, from a TensorFlow it has loaded (no utilisation: TensorFlow
    does not report it); {} without GPUs or TensorFlow."""
    tf = sys.modules.get("tensorflow")
    if tf is None:
        return {}
    try:
        if not tf.config.list_physical_devices("GPU"):  # (asked without starting TensorFlow's runtime)
            return {}
        gpus = tf.config.list_logical_devices("GPU")
        used = sum(tf.config.experimental.get_memory_info(d.name)["current"] for d in gpus)
    except Exception:  # (a device that cannot say: no GPU value, never a failed run)
        return {}
    return {"gpu_mem_bytes": int(used)} if gpus else {}


def gpu_stats() -> dict:
    return nvidia_gpus() or tensorflow_gpus()


class Sampler:
    """Samples this process every `interval` seconds into RUN/system.jsonl from a daemon thread:
    `start()` takes the first sample at once, `stop()` takes a last one and ends the thread.
    `attach(writer, step)` also writes each sample to TensorBoard with `writer` (a
    tf.summary writer) at the step `step()` returns. A sample that cannot be written (a full
    disk) is dropped: system metrics never fail a run."""

    def __init__(self, run_dir, interval: float = INTERVAL, gpus=gpu_stats):
        self.path = Path(run_dir) / FILE
        self.interval = float(interval)
        self.gpus = gpus
        self.process = psutil.Process()
        # The first sample's CPU share is over the process's life so far: over the moment since
        # the sampler was made, it would divide by almost nothing.
        self.last_cpu, self.last_time = 0.0, self.process.create_time()
        self.started = time.time()
        self.writer = self.step = None
        self.done = threading.Event()
        self.lock = threading.Lock()  # one sample at a time: the thread's and stop()'s last one
        self.thread = threading.Thread(target=self._loop, name="distcore-sysmetrics", daemon=True)

    def start(self) -> Sampler:
        self.thread.start()
        return self

    def attach(self, writer, step) -> None:
        self.writer, self.step = writer, step

    def detach(self) -> None:
        """Stop writing to TensorBoard (before its writer is closed); system.jsonl goes on."""
        with self.lock:
            self.writer = self.step = None

    def _loop(self) -> None:
        while True:
            self.sample()
            if self.done.wait(self.interval):
                return

    def stop(self) -> None:
        """Take a last sample and end the thread; a second call does nothing."""
        if self.done.is_set():
            return
        self.done.set()
        if self.thread.is_alive():
            self.thread.join(timeout=5)
            self.sample()

    def record(self) -> dict:
        now, times = time.time(), self.process.cpu_times()
        cpu = times.user + times.system
        share = 100 * (cpu - self.last_cpu) / max(now - self.last_time, 1e-3)
        self.last_cpu, self.last_time = cpu, now
        record = {
            "time": round(now, 3),
            "elapsed": round(now - self.started, 3),
            "cpu_percent": round(share, 1),
            "rss_bytes": int(self.process.memory_info().rss),
        }
        with contextlib.suppress(Exception):  # (see gpu_stats)
            record.update(self.gpus() or {})
        return record

    def sample(self) -> dict | None:
        with self.lock:
            try:
                record = self.record()
            except psutil.Error:
                return None
            with contextlib.suppress(OSError):
                with open(self.path, "a", encoding="utf-8") as f:
                    f.write(json.dumps(record) + "\n")
            if self.writer is not None:
                with contextlib.suppress(Exception):  # (a closed writer, a full disk)
                    self.write_summaries(record)
            return record

    def write_summaries(self, record: dict) -> None:
        import tensorflow as tf

        step = int(self.step()) if self.step else 0
        with self.writer.as_default(step=step):
            for key in ("cpu_percent", "rss_bytes", "gpu_util", "gpu_mem_bytes"):
                if key in record:
                    tf.summary.scalar(f"system/{key}", float(record[key]))


def read(run_dir) -> list[dict]:
    """RUN/system.jsonl's samples, oldest first; torn or foreign lines are skipped."""
    path = Path(run_dir) / FILE
    samples = []
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and all(is_number(record.get(k)) for k in ("time", "elapsed", "cpu_percent")):
            samples.append(record)
    return samples


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def measure_cost(samples: int = 200, writer=None, step=None) -> dict:
    """The sampler's own cost: CPU seconds per sample (its file write and, with `writer`, its
    TensorBoard scalars included), and that cost as a share of one core at the default
    interval, the most it can take from training's throughput (training keeps every core busy)."""
    with tempfile.TemporaryDirectory(prefix="distcore-sysmetrics-") as folder:
        sampler = Sampler(folder)
        if writer is not None:
            sampler.attach(writer, step or (lambda: 0))
        sampler.sample()  # the first: imports and opens what the rest reuse
        cpu, wall = time.thread_time(), time.perf_counter()
        for _ in range(samples):
            sampler.sample()
        cpu, wall = (time.thread_time() - cpu) / samples, (time.perf_counter() - wall) / samples
    return {
        "samples": samples,
        "interval_seconds": INTERVAL,
        "cpu_seconds_per_sample": round(cpu, 6),
        "wall_seconds_per_sample": round(wall, 6),
        "share_of_one_core": round(cpu / INTERVAL, 6),
        "tensorboard": writer is not None,
    }


def measure_cost_with_tensorboard(samples: int = 200) -> dict:
    """measure_cost with the TensorBoard scalars a run writes too (imports TensorFlow: run it in a
    process of its own, as `distcore bench` does)."""
    import tensorflow as tf

    with tempfile.TemporaryDirectory(prefix="distcore-sysmetrics-tb-") as folder:
        writer = tf.summary.create_file_writer(folder)
        try:
            return measure_cost(samples, writer=writer)
        finally:
            writer.close()
