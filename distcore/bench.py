"""`python -m distcore bench`: distcore's loop against the tutorial's loop and Keras fit.

Same machine, same model (the tutorial CNN), same real Fashion-MNIST, same
per-replica batch (64), same device sets and the same strategy constructor
(`devices.make_strategy`) for every contender. Each contender runs in a process
of its own for each replica count (a process configures its logical devices and
threads once): distcore's with its own thread setting, the tutorial's and Keras
fit's with TensorFlow's defaults, as their users would run them (`--same-threads`
gives them distcore's too). The contenders take turns, in a rotated order,
`repeats` times, so machine noise hits all of them alike; the report gives
medians and pair-by-pair ratios.

Contenders, measured in examples per second over `steps` global steps after
`warmup` untimed steps on a fresh iterator (tracing happens in an untimed round
before the first measurement):

- distcore: `loop.StepRunner.train_steps` fed by `inputs.distribute` exactly as
  `controller.Controller.run_epoch` does (same config defaults, K steps a call,
  its Adam `optimizer.FusedAdam`: one fused kernel per variable, and its
  `model` Conv2D: the first layer's one-channel convolution runs as a depthwise one);
- tutorial: the custom-training tutorial's loop as written (float32 arrays,
  from_tensor_slices, shuffle, batch, experimental_distribute_dataset, one
  `tf.function` call per step), changed only where current TensorFlow requires:
  `strategy.run`, Keras 3 `reduction="none"`, `optimizer.build` inside the scope,
  and Adam and Conv2D are Keras 3's (as its users get them from `keras.optimizers.Adam()`
  and `keras.layers.Conv2D`);
- keras_fit: `Model.fit` under the same strategy (compiled inside the scope,
  Keras's Adam and Conv2D, SparseCategoricalCrossentropy(from_logits=True),
  accuracy metric), fed
  distcore's own input pipeline, so the comparison is about the loop alone.

Also measured: step_only (distcore's replica step on a batch already on the
devices: no input pipeline, K steps a call, the loop's own limit); the ceiling
(measured float32 matmul FLOP/s / the model's FLOPs per example); peak memory
and time to the first step record of a real `python -m distcore train`
process; and the split visualiser's time for a 64-step, 8-replica plan.

Each speed target is reported next to what step_only reached in the same run:
no loop over these kernels does better, so a target above it is out of reach
for any loop on this machine. At each replica count, step_only and distcore's
loop also take turns in one process (fastest of several rounds): how much
longer distcore's step takes is what the loop and its input cost, split by two more
contenders in the same rounds (distcore's loop fed one cached batch; the input alone) into
the iterator training reads, the data pipeline and the Python between calls. A tf.profiler
trace of each says what a step spends.

`--task gan` measures the loop-from-scratch guide's GAN instead (`tasks.GAN`, the guide's
models, Fashion-MNIST, global batch 64 at every replica count): distcore's loop (StepRunner with
the GAN task, fed as the Controller feeds it, K steps a call) against the guide's loop as written
(its `@tf.function` train_step run by `strategy.run` once a step from a Python for loop over the
distributed dataset), in the same rounds, processes and medians; and, as a check that both train
the same GAN, each one's d_loss and g_loss over its first steps on 1 replica from the same
initial weights.

The orchestrating process never imports TensorFlow; workers are
`python -m distcore.bench --worker KIND ...` and print JSON lines.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import platform
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PER_REPLICA_BATCH = 64
CONTENDERS = ("distcore", "tutorial", "keras_fit")
MEASURED = (*CONTENDERS, "step_only")
GAN_CONTENDERS = ("distcore", "guide", "step_only")
TF_DEFAULT_THREADS = ("tutorial", "keras_fit", "guide")  # what their users run: TensorFlow's own threading
GAN_GLOBAL_BATCH = 64  # the guide's batch_size, at every replica count
GAN_STEPS = 20
GAN_WARMUP = 3
DEFAULT_TREND_STEPS = 200
DEFAULT_REPLICAS = (1, 2, 4)
DEFAULT_STEPS = 60
DEFAULT_REPEATS = 5
DEFAULT_WARMUP = 10
TARGETS = {
    "ceiling_share": {1: 0.85, "default": 0.80},
    "vs_tutorial": 1.1,
    "vs_keras_fit": 1.3,
    "vs_guide": 1.1,
    "share_of_step_only": 0.9,  # distcore's loop against the same step with no loop cost
    "scaling": 0.9,  # examples/s at R replicas against 1 replica, where R fit on the cores
    "peak_memory_gib": 1.5,
    "first_step_seconds": 8.0,
    "split_plan_seconds": 1.0,
    "sysmetrics_share": 0.02,  # of one core: the system-metrics sampler's most from throughput
}
ROOT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------------------
# Orchestration (no TensorFlow in this process)
# ----------------------------------------------------------------------------------------


def run(
    replicas=DEFAULT_REPLICAS,
    steps: int = DEFAULT_STEPS,
    repeats: int = DEFAULT_REPEATS,
    warmup: int = DEFAULT_WARMUP,
    memory_steps: int = 200,
    quick: bool = False,
    same_threads: bool = False,
    log=None,
) -> dict:
    """Run every measurement, each kind in processes of its own; return the report."""
    log = log or (lambda message: None)
    replicas = tuple(int(r) for r in replicas)
    started = time.perf_counter()
    load_start = [round(x, 2) for x in os.getloadavg()]
    log("ceiling: float32 matmul FLOP/s and the model's layers alone ...")
    ceiling = worker("ceiling", *(["--quick"] if quick else []))
    phases = {"ceiling": round(time.perf_counter() - started, 1)}
    results, samples, extras = [], {}, {}
    for r in replicas:
        log(f"{r} replica(s): {', '.join(CONTENDERS)} x {repeats}, {steps} steps each ...")
        out = train_round(r, steps, repeats, warmup, same_threads)
        samples[str(r)] = out["samples"]
        extras[str(r)] = {k: out[k] for k in ("order", "cpu_us_per_example", "contenders")}
        row = {"replicas": r, "global_batch": PER_REPLICA_BATCH * r}
        for name in MEASURED:
            row[name] = round(statistics.median(out["samples"][name]), 1)
        for other in ("tutorial", "keras_fit"):
            row[f"vs_{other}"] = paired_ratio(out["samples"], "distcore", other)
            # A loop with no overhead at all runs at step_only: no loop over these kernels beats this.
            row[f"step_only_vs_{other}"] = paired_ratio(out["samples"], "step_only", other)
            cpu = out["cpu_us_per_example"]
            row[f"vs_{other}_cpu"] = round(statistics.median(b / a for a, b in zip(cpu["distcore"], cpu[other])), 3)
        row["cpu_us_per_example"] = {
            name: round(statistics.median(v), 1) for name, v in out["cpu_us_per_example"].items()
        }
        row["share_of_step_only"] = round(row["distcore"] / row["step_only"], 3)
        results.append(row)
    log(f"peak memory and first step of `python -m distcore train` ({max(replicas)} replicas) ...")
    phases["train_workers"] = round(time.perf_counter() - started - phases["ceiling"], 1)
    process = train_process(max(replicas), memory_steps, test_examples=512 if quick else None)
    phases["train_process"] = process["total_seconds"]
    # The ceiling is what the machine can do: the best matmul rate seen, measured again at
    # the end so a burst of other load at the start does not lower it.
    if not quick:
        log("ceiling again ...")
        again = worker("ceiling", "--no-profile")
        ceiling["matmul_samples"] += again["matmul_samples"]
        ceiling["matmul_flops_per_sec"] = max(ceiling["matmul_flops_per_sec"], again["matmul_flops_per_sec"])
    ceiling_eps = ceiling["matmul_flops_per_sec"] / ceiling["flops_per_example"]
    for row in results:
        row["ceiling_share"] = round(row["distcore"] / ceiling_eps, 3)
        row["step_only_ceiling_share"] = round(row["step_only"] / ceiling_eps, 3)
    profiles = []
    for r in replicas:
        log(f"profile of step_only and distcore's loop on {r} replica(s) ...")
        profiles.append(worker("profile", "--replicas", r, *(["--steps", 5, "--quick"] if quick else ["--steps", 40])))
    log("split visualiser: 64-step, 8-replica plan ...")
    split = worker("split")
    log("system-metrics sampler: CPU per sample ...")
    sampler = worker("sysmetrics")
    report = {
        "results": results,
        "ceiling": round(ceiling_eps, 1),
        "ceiling_detail": ceiling,
        "samples": samples,
        "runs": extras,
        "train_process": process,
        "peak_memory_gib": process["peak_rss_gib"],
        "first_step_seconds": process["first_step_seconds"],
        "split_plan_seconds": split["first_plan_seconds"],
        "split": split,
        "sysmetrics": sampler,  # share_of_one_core: the most it takes from training's throughput
        "step_profiles": profiles,
        "overhead": [{"replicas": p["replicas"], **p["overhead"]} for p in profiles],
        "settings": {
            "replicas": list(replicas),
            "steps": steps,
            "repeats": repeats,
            "warmup": warmup,
            "per_replica_batch": PER_REPLICA_BATCH,
            "memory_steps": memory_steps,
            "quick": quick,
            "same_threads": same_threads,
        },
        "machine": machine_info(ceiling),
        "seconds": round(time.perf_counter() - started, 1),
        "phase_seconds": phases,
    }
    report["machine"]["load_average_at_start"] = load_start
    report["targets"] = check_targets(report)
    return report


def run_gan(
    replicas=DEFAULT_REPLICAS,
    steps: int = GAN_STEPS,
    repeats: int = DEFAULT_REPEATS,
    warmup: int = GAN_WARMUP,
    global_batch: int = GAN_GLOBAL_BATCH,
    trend_steps: int = DEFAULT_TREND_STEPS,
    same_threads: bool = False,
    log=None,
) -> dict:
    """The GAN: distcore's loop against the guide's, in turns (train_round); then, on 1 replica,
    both contenders' losses over their first `trend_steps` steps (none when 0)."""
    log = log or (lambda message: None)
    started = time.perf_counter()
    load_start = [round(x, 2) for x in os.getloadavg()]
    results, samples, extras = [], {}, {}
    for r in replicas:
        log(f"GAN, {r} replica(s): {', '.join(GAN_CONTENDERS)} x {repeats}, {steps} steps each ...")
        extra = ("--task", "gan", "--global-batch", global_batch)
        out = train_round(r, steps, repeats, warmup, same_threads, GAN_CONTENDERS, extra)
        samples[str(r)] = out["samples"]
        extras[str(r)] = {k: out[k] for k in ("order", "cpu_us_per_example", "contenders")}
        cpu = out["cpu_us_per_example"]
        results.append(
            {
                "replicas": r,
                "global_batch": global_batch,
                **{name: round(statistics.median(out["samples"][name]), 1) for name in GAN_CONTENDERS},
                "vs_guide": paired_ratio(out["samples"], "distcore", "guide"),
                # A loop with no overhead at all runs at step_only: no loop over these kernels beats this.
                "step_only_vs_guide": paired_ratio(out["samples"], "step_only", "guide"),
                "vs_guide_cpu": round(statistics.median(b / a for a, b in zip(cpu["distcore"], cpu["guide"])), 3),
                "cpu_us_per_example": {name: round(statistics.median(v), 1) for name, v in cpu.items()},
            }
        )
    trend = None
    if trend_steps:
        log(f"GAN losses over the first {trend_steps} steps on 1 replica, both loops ...")
        trend = worker("gan_trend", "--steps", trend_steps, "--global-batch", global_batch)
    info = next(iter(extras.values()))["contenders"]["distcore"]
    report = {
        "task": "gan",
        "results": results,
        "samples": samples,
        "runs": extras,
        "trend": trend,
        "settings": {
            "replicas": list(replicas),
            "steps": steps,
            "repeats": repeats,
            "warmup": warmup,
            "global_batch": global_batch,
            "trend_steps": trend_steps,
            "same_threads": same_threads,
        },
        "machine": {**machine_info(info), "load_average_at_start": load_start},
        "seconds": round(time.perf_counter() - started, 1),
    }
    report["targets"] = {
        f"vs_guide@{row['replicas']}": at_least(row["vs_guide"], TARGETS["vs_guide"], row["step_only_vs_guide"])
        for row in results
    }
    return report


def worker_command(kind: str, *args) -> tuple[list[str], dict]:
    """The command line and environment of `python -m distcore.bench --worker KIND ARGS`."""
    cmd = [sys.executable, "-m", "distcore.bench", "--worker", kind, *map(str, args)]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2")}
    return cmd, env


def die_with_parent() -> None:
    """In a bench worker, before it runs: SIGKILL when the bench process ends, however it ends.
    Otherwise a SIGTERM to `bench` leaves its contenders measuring for up to 75 s. Linux only."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG


def worker(kind: str, *args) -> dict:
    """Run `python -m distcore.bench --worker KIND ARGS` and return its JSON line."""
    cmd, env = worker_command(kind, *args)
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, preexec_fn=die_with_parent
    )
    try:
        stdout, stderr = proc.communicate()
    except BaseException:  # a stop: let it clean up (killed, its autograph files would stay in TMPDIR)
        leave_gently(proc)
        raise
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"bench worker {kind} failed (exit {proc.returncode}):\n{stderr[-3000:]}")
    return json.loads(lines[-1])


def paired_ratio(samples: dict, a: str, b: str) -> float:
    """Median of a/b over the rounds: the pair measured side by side shares its noise."""
    return round(statistics.median(x / y for x, y in zip(samples[a], samples[b])), 3)


def train_round(
    replicas: int,
    steps: int,
    repeats: int,
    warmup: int,
    same_threads: bool = False,
    contenders=MEASURED,
    extra=(),
) -> dict:
    """Every contender in a process of its own, measured in turn, `repeats` times.

    Own processes because threading is set per process: distcore's processes give
    each op a share of the cores (`devices.intra_op_threads`), the tutorial's and
    Keras fit's run with TensorFlow's defaults, as their users run them (with
    `same_threads`, distcore's setting too: the loops alone). Only one process
    works at a time; the others wait on their stdin. `contenders`, and `extra` arguments for each
    one's worker: the classifier's by default, the GAN's from run_gan.
    """
    procs = {
        name: ContenderProcess(
            name,
            replicas,
            steps,
            warmup,
            tf_default_threads=name in TF_DEFAULT_THREADS and not same_threads,
            extra=extra,
        )
        for name in contenders
    }
    try:
        info = {name: proc.ready() for name, proc in procs.items()}
        samples = {name: [] for name in contenders}
        cpu = {name: [] for name in contenders}
        orders = []
        for rep in range(repeats):
            turn = list(contenders[rep % len(contenders) :] + contenders[: rep % len(contenders)])
            orders.append(turn)
            for name in turn:
                rate, cpu_us = procs[name].measure(max(1, steps // 2) if name == "step_only" else steps, warmup)
                samples[name].append(round(rate, 1))
                cpu[name].append(round(cpu_us, 1))
    finally:
        for proc in procs.values():
            proc.close()
    return {"replicas": replicas, "samples": samples, "cpu_us_per_example": cpu, "order": orders, "contenders": info}


class ContenderProcess:
    """`python -m distcore.bench --worker serve`: one contender, measuring on request."""

    def __init__(self, name: str, replicas: int, steps: int, warmup: int, tf_default_threads: bool, extra=()):
        self.name = name
        self.log = tempfile.TemporaryFile("w+")
        cmd, env = worker_command(
            "serve", "--contender", name, "--replicas", replicas, "--steps", steps, "--warmup", warmup, *extra
        )
        if tf_default_threads:
            env["TF_NUM_INTRAOP_THREADS"] = "0"  # TensorFlow's default; devices.configure leaves it alone
        self.proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=env,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            preexec_fn=die_with_parent,
        )

    def _reply(self) -> dict:
        for line in self.proc.stdout:
            if line.startswith("{"):
                return json.loads(line)
        self.proc.wait()
        self.log.seek(0)
        raise RuntimeError(
            f"bench contender {self.name} failed (exit {self.proc.returncode}):\n{self.log.read()[-3000:]}"
        )

    def ready(self) -> dict:
        return self._reply()

    def measure(self, steps: int, warmup: int) -> tuple[float, float]:
        self.proc.stdin.write(f"{steps} {warmup}\n")
        self.proc.stdin.flush()
        reply = self._reply()
        return reply["rate"], reply["cpu_us"]

    def close(self) -> None:
        """Ask the worker to leave (its stdin closed); one still measuring (the bench was stopped)
        is interrupted, so it leaves through its clean-up, and killed only if that hangs."""
        if self.proc.poll() is None:
            self.proc.stdin.close()  # the worker's cue to exit
            leave_gently(self.proc)
        self.log.close()


def leave_gently(proc) -> None:
    """Let a worker leave through its clean-up: 2 s (a Ctrl-C in the terminal reached it too),
    then a Ctrl-C of its own, 30 s, and only then SIGKILL."""
    for ask, wait in ((None, 2), (signal.SIGINT, 30), (signal.SIGKILL, None)):
        if ask is not None:
            proc.send_signal(ask)
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def train_process(replicas: int, max_steps: int, test_examples: int | None = None) -> dict:
    """Launch `python -m distcore train --json` and time it to its first step record;
    its peak resident memory comes from wait4's rusage of that one child."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable,
            "-m",
            "distcore",
            "train",
            "--run-dir",
            str(Path(tmp) / "run"),
            "--replicas",
            str(replicas),
            "--max-steps",
            str(max_steps),
            "--json",
        ]
        if test_examples:  # --quick: a smaller test pass at the end (memory then understates)
            cmd += ["--test-examples", str(test_examples)]
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
        launched = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        first_step = start_event = None
        rates = []
        for line in proc.stdout:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if record.get("event") == "start" and start_event is None:
                start_event = time.perf_counter() - launched
            if "loss" in record and "step" in record:
                if first_step is None:
                    first_step = time.perf_counter() - launched
                if "examples_per_sec" in record:  # none from the chunk that traced
                    rates.append(record["examples_per_sec"])
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        total = time.perf_counter() - launched
    if proc.returncode != 0 or first_step is None:
        raise RuntimeError(f"`{' '.join(cmd[1:])}` failed (exit {proc.returncode}).")
    chunks = sorted(set(rates), key=rates.index)  # one rate per chunk of steps, the one that traced left out
    return {
        "replicas": replicas,
        "steps": max_steps,
        "peak_rss_gib": round(usage.ru_maxrss * 1024 / 2**30, 3),  # ru_maxrss is in KiB on Linux
        "first_step_seconds": round(first_step, 2),
        "total_seconds": round(total, 2),
        "start_event_seconds": round(start_event, 2) if start_event is not None else None,
        "steps_per_loop_note": "step records are printed when a chunk of steps_per_loop steps ends",
        "median_chunk_examples_per_sec": round(statistics.median(chunks), 1) if chunks else None,
    }


def cpu_name() -> str:
    """The CPU as /proc/cpuinfo names it, with its family and model: a cloud host's "AMD EPYC"
    alone hides a move from Zen 4 (family 25) to Zen 5 (26), whose matmul runs twice as fast."""
    try:
        fields = dict(
            line.split(":", 1)
            for line in Path("/proc/cpuinfo").read_text().split("\n\n")[0].splitlines()
            if ":" in line
        )
    except OSError:
        return platform.processor() or platform.machine()
    fields = {key.strip(): value.strip() for key, value in fields.items()}
    name = fields.get("model name") or platform.processor() or platform.machine()
    family = ", ".join(f"{key} {fields[key]}" for key in ("cpu family", "model") if fields.get(key))
    return f"{name} ({family})" if family else name


def machine_info(ceiling: dict) -> dict:
    """The machine, with TensorFlow's and Keras's versions from a worker's answer (`ceiling`'s or a contender's)."""
    model = cpu_name()
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "gpus": ceiling.get("gpus", []),
        "tensorflow": ceiling.get("tensorflow"),
        "keras": ceiling.get("keras"),
        "python": platform.python_version(),
        "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default"),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
    }


def at_least(value: float, want: float, bound: float) -> dict:
    """A ">= want" target, next to what `step_only` (the same step, with no loop cost at
    all) reached in the same run: no loop over these kernels does better, so a target
    above it is out of reach here, whatever the loop."""
    check = {
        "value": value,
        "target": f">= {want}",
        "met": value >= want,
        "bound": bound,
        "reachable": value >= want or bound >= want,
    }
    if bound < value < want:  # not "out of reach" when the loop itself came nearer than step_only
        check.update(reachable=None, note="step_only ran slower than distcore's loop here (other load): no bound")
    return check


def check_targets(report: dict) -> dict:
    checks = {}
    quick = (report.get("settings") or {}).get("quick")
    for row in report["results"]:
        r = row["replicas"]
        share = TARGETS["ceiling_share"].get(r, TARGETS["ceiling_share"]["default"])
        checks[f"ceiling_share@{r}"] = at_least(row["ceiling_share"], share, row["step_only_ceiling_share"])
        if quick:  # a ceiling of 2 brief matmuls (52 GFLOP/s against 219) would "meet" 85% at 1 replica
            checks[f"ceiling_share@{r}"].update(met=None, note="not judged: --quick measures the ceiling too briefly")
        for other in ("tutorial", "keras_fit"):
            checks[f"vs_{other}@{r}"] = at_least(
                row[f"vs_{other}"], TARGETS[f"vs_{other}"], row[f"step_only_vs_{other}"]
            )
    overhead = {item["replicas"]: item for item in report.get("overhead", [])}
    for row in report["results"]:
        r = row["replicas"]
        # Bound: the share that distcore's loop reached fed one cached batch through the iterator
        # training reads (the overhead breakdown's rounds), with no data pipeline at all.
        item = overhead.get(r) or {}
        bound = item.get("iterator_bound")
        value, want = row["share_of_step_only"], TARGETS["share_of_step_only"]
        if bound and not item.get("disturbed"):
            check = at_least(value, want, bound)
            check.update(bound_by="distcore fed one cached batch", out_of_reach="the iterator training reads")
        else:
            check = {"value": value, "target": f">= {want}", "met": value >= want}
            if bound:  # a part below zero: other load slowed those rounds, so they bound nothing
                check["note"] = "the overhead breakdown was disturbed by other load: no bound"
        checks[f"share_of_step_only@{r}"] = check
    by_replicas = {row["replicas"]: row for row in report["results"]}
    cores = (report.get("machine") or {}).get("cores")
    if 1 in by_replicas:
        one = by_replicas[1]
        for r, row in by_replicas.items():
            if r > 1 and (cores is None or r <= cores):  # more replicas than cores share them
                checks[f"scaling@{r}"] = at_least(
                    round(row["distcore"] / one["distcore"], 3),
                    TARGETS["scaling"],
                    round(row["step_only"] / one["step_only"], 3),
                )
    for key in ("peak_memory_gib", "first_step_seconds", "split_plan_seconds"):
        checks[key] = {"value": report[key], "target": f"< {TARGETS[key]}", "met": report[key] < TARGETS[key]}
    if "sysmetrics" in report:  # (reports of older versions have none)
        share = report["sysmetrics"]["share_of_one_core"]
        checks["sysmetrics_share"] = {
            "value": share,
            "target": f"< {TARGETS['sysmetrics_share']}",
            "met": share < TARGETS["sysmetrics_share"],
        }
    return checks


def format_report(report: dict) -> str:
    lines = [
        f"{report['machine']['cpu']}, {report['machine']['cores']} cores, TensorFlow "
        f"{report['machine']['tensorflow']}; {report['settings']['steps']} steps x "
        f"{report['settings']['repeats']} interleaved repeats, per-replica batch {PER_REPLICA_BATCH}",
        "",
        f"{'replicas':>8} {'distcore':>9} {'tutorial':>9} {'keras_fit':>9} {'step_only':>9} "
        f"{'vs_tut':>7} {'vs_fit':>7} {'ceiling%':>8}",
    ]
    for row in report["results"]:
        lines.append(
            f"{row['replicas']:>8} {row['distcore']:>9.0f} {row['tutorial']:>9.0f} "
            f"{row['keras_fit']:>9.0f} {row['step_only']:>9.0f} {row['vs_tutorial']:>6.2f}x "
            f"{row['vs_keras_fit']:>6.2f}x {100 * row['ceiling_share']:>7.1f}%"
        )
    lines += [
        "(examples/s, medians; ratios are medians of pair-by-pair ratios)",
        "a loop with no overhead (step_only) against the others: "
        + "; ".join(
            f"{row['replicas']}: {row['step_only_vs_tutorial']:.2f}x tutorial, "
            f"{row['step_only_vs_keras_fit']:.2f}x keras_fit"
            for row in report["results"]
        ),
        threads_line(report),
        "optimizers and Conv2D layers: "
        + ", ".join(
            f"{name} {info['optimizer']} + {info['conv2d']}'s"
            for name, info in next(iter(report["runs"].values()))["contenders"].items()
        ),
        "",
        "CPU time per example (us, all threads; less disturbed by other load than wall time):",
    ]
    for row in report["results"]:
        cpu = row["cpu_us_per_example"]
        lines.append(
            f"{row['replicas']:>8} "
            + " ".join(f"{name} {cpu[name]:.0f}" for name in MEASURED)
            + f"  -> tutorial/distcore {row['vs_tutorial_cpu']:.2f}x, keras_fit/distcore "
            f"{row['vs_keras_fit_cpu']:.2f}x"
        )
    c = report["ceiling_detail"]
    lines += [
        "",
        f"ceiling: {c['matmul_flops_per_sec'] / 1e9:.1f} GFLOP/s ({c['matmul_size']}x{c['matmul_size']} "
        f"float32 matmul, best of {len(c['matmul_samples'])}) / {c['flops_per_example'] / 1e6:.2f} MFLOP per example = "
        f"{report['ceiling']:.0f} examples/s",
        "the model's Conv2D/Dense layers alone, forward + backward at batch 64: "
        + ", ".join(
            f"{x['layer']} {x['ms']:.2f} ms ({x['gflops_per_sec']:.0f} GFLOP/s)" for x in c["layer_profile"]["layers"]
        )
        + f" -> at most {c['layer_profile']['kernels_examples_per_sec']:.0f} examples/s on one replica",
        "a step, in one process (ms a global step, fastest of the untraced rounds; then from the fastest "
        "tf.profiler trace: the compute threads' busy ms a step in all, the convolutions' share of that):",
        *(
            f"{p['replicas']:>8} "
            + "; ".join(
                f"{name} {p[name]['step_ms']} ms (traced {p[name]['traced_step_ms']}), busy "
                f"{p[name]['busy_thread_ms_per_step']} ms, {100 * (p[name]['conv_share_of_busy'] or 0):.0f}% conv"
                for name in ("step_only", "distcore")
            )
            + f"  -> distcore's step {p['distcore_step_vs_step_only']:.2f}x step_only's"
            for p in report["step_profiles"]
        ),
        "where distcore's step time beyond step_only's goes (ms a global step, same process, fastest "
        "rounds; the iterator training reads fed one cached batch, the data pipeline's fresh batches on top):",
        *(format_overhead(item, item["replicas"]) for item in report["overhead"]),
        f"train process ({report['train_process']['replicas']} replicas, "
        f"{report['train_process']['steps']} steps): peak RSS {report['peak_memory_gib']:.2f} GiB, "
        f"first step record {report['first_step_seconds']:.2f} s after launch (start event at "
        f"{report['train_process']['start_event_seconds']} s)",
        f"split plan (512 examples, G=8, 8 replicas, 64 steps): {report['split_plan_seconds']:.3f} s "
        f"(a second plan in the same process: {report['split']['second_plan_seconds']:.3f} s; "
        f"building its 8-device strategy: {report['split']['make_strategy_seconds']:.3f} s, a plan on a "
        f"ready strategy: {report['split']['plan_with_given_strategy_seconds']:.3f} s; dropping the used "
        f"iterator after the answer: {report['split']['teardown_after_answer_seconds']} s)",
        f"load average at start/end: {report['machine']['load_average_at_start']} / "
        f"{report['machine']['load_average_at_end']}",
        "",
        "targets (next to each speed target, what bounds it in this run: step_only, the same step with",
        "no loop cost, so no loop over these kernels does better; for distcore's share of step_only,",
        "its loop fed one cached batch through the iterator training reads, so no loop fed by it does better):",
    ]
    lines += format_targets(report["targets"])
    return "\n".join(lines)


def threads_line(report: dict) -> str:
    """Each contender process's intra-op thread count, per replica count."""
    return "intra-op threads per process: " + "; ".join(
        f"{r}: " + ", ".join(f"{name} {info['intra_op_threads']}" for name, info in run["contenders"].items())
        for r, run in report["runs"].items()
    )


def format_gan_report(report: dict) -> str:
    settings, machine = report["settings"], report["machine"]
    lines = [
        f"{machine['cpu']}, {machine['cores']} cores, TensorFlow {machine['tensorflow']}; the guide's GAN, "
        f"global batch {settings['global_batch']}; {settings['steps']} steps x {settings['repeats']} "
        "interleaved repeats",
        "",
        f"{'replicas':>8} {'distcore':>9} {'guide':>9} {'step_only':>9} {'vs_guide':>9} {'step_only_vs_guide':>18}",
        *(
            f"{row['replicas']:>8} {row['distcore']:>9.1f} {row['guide']:>9.1f} {row['step_only']:>9.1f} "
            f"{row['vs_guide']:>8.3f}x {row['step_only_vs_guide']:>17.3f}x"
            for row in report["results"]
        ),
        "(examples/s, medians; ratios are medians of pair-by-pair ratios)",
        threads_line(report),
        "CPU time per example (us, all threads): "
        + "; ".join(
            f"{row['replicas']}: "
            + ", ".join(f"{name} {us:.0f}" for name, us in row["cpu_us_per_example"].items())
            + f" -> guide/distcore {row['vs_guide_cpu']:.3f}x"
            for row in report["results"]
        ),
    ]
    if report["trend"]:
        lines += ["", f"mean losses by steps, 1 replica, the same initial weights ({report['trend']['data']}):"]
        for window in report["trend"]["windows"]:
            lines.append(
                f"  steps {window['steps']:>9}: "
                + "; ".join(
                    f"{name} d_loss {window[name]['d_loss']:.3f} g_loss {window[name]['g_loss']:.3f}"
                    for name in ("distcore", "guide")
                )
            )
    lines += [
        f"load average at start/end: {machine['load_average_at_start']} / {machine['load_average_at_end']}",
        "",
        "targets (next to each, what step_only reached: the same step with no loop cost):",
        *format_targets(report["targets"]),
    ]
    return "\n".join(lines)


def format_targets(targets: dict) -> list[str]:
    """One line a target: met or MISS, the value, and for a speed target what step_only reached."""
    lines = []
    for name, check in targets.items():
        limit = ""
        if "bound" in check:
            limit = f"; {check.get('bound_by', 'step_only')} {check['bound']}" + (
                ""
                if check["reachable"] is not False
                else ": out of reach for any loop"
                + (f" fed by {check['out_of_reach']}" if check.get("out_of_reach") else "")
            )
        verdict = "n/a " if check["met"] is None else "met " if check["met"] else "MISS"
        note = f"; {check['note']}" if check.get("note") else ""
        lines.append(f"  {verdict}  {name}: {check['value']} (target {check['target']}{limit}{note})")
    return lines


def main(args) -> int:
    """The `bench` subcommand (cli.py hands over its parsed args)."""
    from .config import MAX_LOGICAL_CPUS, DistcoreError, check_int

    try:
        replicas = [
            check_int("replicas", r, high=MAX_LOGICAL_CPUS)
            for r in str(args.replicas or "1,2,4").split(",")
            if r.strip()
        ]
    except DistcoreError:
        raise DistcoreError(
            f"--replicas ({args.replicas!r}) must be a comma-separated list of counts from 1 to "
            f"{MAX_LOGICAL_CPUS} (the logical CPU devices a process can have), e.g. 1,2,4."
        ) from None
    if not replicas:
        raise DistcoreError("--replicas is empty: give counts such as 1,2,4.")
    if len(set(replicas)) < len(replicas):  # 1,1 would measure the same set twice, as two rows
        raise DistcoreError(f"--replicas ({args.replicas!r}) lists a count twice: give each once, e.g. 1,2,4.")
    task = (args.task or "classifier").strip().lower()
    if task not in ("classifier", "gan"):
        raise DistcoreError(f"--task ({args.task!r}) must be classifier or gan.")
    other, flags = (
        ("classifier", ("quick", "memory_steps")) if task == "gan" else ("gan", ("global_batch", "trend_steps"))
    )
    for flag in flags:
        if getattr(args, flag) not in (None, False):
            raise DistcoreError(f"--{flag.replace('_', '-')} applies only to --task {other}.")
    # A GAN step is some 30 times the classifier's: fewer steps measure as long.
    default_steps, default_warmup = (GAN_STEPS, GAN_WARMUP) if task == "gan" else (DEFAULT_STEPS, DEFAULT_WARMUP)
    steps = check_int("steps", args.steps if args.steps is not None else default_steps, high=100_000)
    repeats = check_int("repeats", args.repeats if args.repeats is not None else DEFAULT_REPEATS, high=100)
    warmup = check_int("warmup", args.warmup if args.warmup is not None else default_warmup, low=1, high=10_000)
    memory_steps = check_int("memory steps", args.memory_steps if args.memory_steps is not None else 200, high=100_000)
    global_batch = check_int("global batch", args.global_batch or GAN_GLOBAL_BATCH, high=65_536)
    trend = args.trend_steps if args.trend_steps is not None else DEFAULT_TREND_STEPS
    trend = check_int("trend steps", trend, low=0, high=100_000)
    log = (lambda m: None) if args.json else (lambda m: print(m, file=sys.stderr, flush=True))
    with stops_as_ctrl_c():
        if task == "gan":
            report = run_gan(replicas, steps, repeats, warmup, global_batch, trend, args.same_threads, log)
        else:
            report = run(
                replicas, steps, repeats, warmup, memory_steps, args.quick, same_threads=args.same_threads, log=log
            )
    text = format_gan_report if task == "gan" else format_report
    print(json.dumps(report) if args.json else text(report), flush=True)
    return 0


@contextlib.contextmanager
def stops_as_ctrl_c():
    """A SIGTERM or SIGHUP takes Ctrl-C's way out, through the clean-ups (contenders asked to
    stop, the train measurement's folder removed). By default it kills the bench at once, its
    workers go with it (die_with_parent), and their autograph files stay in TMPDIR."""
    from .stopping import handling, interruption

    def interrupt(signum, frame):
        raise interruption(signum)

    with handling((signal.SIGTERM, signal.SIGHUP), interrupt):
        yield


def add_arguments(parser) -> None:
    parser.add_argument(
        "--task",
        help="classifier (default: the tutorial's CNN against the tutorial's loop and Keras fit) or gan "
        "(the loop-from-scratch guide's GAN against the guide's loop)",
    )
    parser.add_argument("--replicas", help="comma-separated replica counts (default 1,2,4)")
    parser.add_argument(
        "--steps", help=f"timed global steps per measurement (default {DEFAULT_STEPS}; --task gan: {GAN_STEPS})"
    )
    parser.add_argument("--repeats", help=f"interleaved repeats per contender (default {DEFAULT_REPEATS})")
    parser.add_argument(
        "--warmup", help=f"untimed steps before each measurement (default {DEFAULT_WARMUP}; --task gan: {GAN_WARMUP})"
    )
    parser.add_argument(
        "--memory-steps", help="classifier: steps of the train process measured for memory (default 200)"
    )
    parser.add_argument(
        "--global-batch", help=f"--task gan: global batch at every replica count (default {GAN_GLOBAL_BATCH})"
    )
    parser.add_argument(
        "--trend-steps",
        help=f"--task gan: steps of each loop's losses on 1 replica, a check that both train the same GAN "
        f"(default {DEFAULT_TREND_STEPS}; 0: none)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="classifier: shorter ceiling, layer and profile measurements, whose ceiling shares are not "
        "judged (a smoke run, not a benchmark)",
    )
    parser.add_argument(
        "--same-threads",
        action="store_true",
        help="run the tutorial and Keras fit (--task gan: the guide's loop) with distcore's thread setting too "
        "(the loops alone)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")


# ----------------------------------------------------------------------------------------
# Workers (TensorFlow; one process each)
# ----------------------------------------------------------------------------------------


def worker_ceiling(
    size: int = 2048, repeats: int = 5, seconds: float = 1.0, quick: bool = False, profile: bool = True
) -> dict:
    """float32 matmul FLOP/s with TensorFlow's default threading (all cores)."""
    import keras
    import tensorflow as tf

    from .model import create_model, flops_per_example

    a = tf.random.normal((size, size), seed=1)
    b = tf.random.normal((size, size), seed=2)

    @tf.function
    def chain(a, b, n):
        acc = tf.zeros_like(a)
        for _ in tf.range(n):
            acc += tf.matmul(a, b)  # the add is size^2 work next to size^3: noise
        return tf.reduce_sum(acc)

    if quick:
        repeats, seconds = 2, 0.2
    flop = 2 * size**3
    chain(a, b, tf.constant(1)).numpy()
    t = time.perf_counter()
    chain(a, b, tf.constant(2)).numpy()
    n = max(2, int(seconds / max((time.perf_counter() - t) / 2, 1e-6)))
    rates = []
    for _ in range(repeats):
        t = time.perf_counter()
        chain(a, b, tf.constant(n)).numpy()
        rates.append(flop * n / (time.perf_counter() - t))
    return {
        "matmul_size": size,
        "matmul_flops_per_sec": max(rates),  # the machine's best: a ceiling
        "matmul_samples": [round(r / 1e9, 2) for r in rates],
        "flops_per_example": flops_per_example(create_model("cnn")),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "gpus": [d.name for d in tf.config.list_physical_devices("GPU")],
        "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
        "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
        "layer_profile": None if not profile else layer_profile(repeats=1, calls=5) if quick else layer_profile(),
    }


def layer_profile(batch: int = PER_REPLICA_BATCH, repeats: int = 3, calls: int = 50) -> dict:
    """Each Conv2D/Dense layer's forward + backward at the training batch, alone: the
    FLOP/s the kernels themselves reach on this model's small shapes (the first
    layer needs no gradient for its input, as in training)."""
    import keras
    import tensorflow as tf

    from .model import create_model, layer_flops

    keras.utils.set_random_seed(0)
    model = create_model("cnn")
    counted = dict(layer_flops(model))
    h = tf.random.uniform((batch, 28, 28, 1))
    layers = []
    for layer in model.layers:
        if layer in counted:
            flops = batch * counted[layer]
            wrt_input = bool(layers)  # the first layer's input (the image) needs no gradient

            @tf.function
            def steps(x, n, layer=layer, wrt_input=wrt_input):
                total = tf.constant(0.0)
                for _ in tf.range(n):
                    with tf.GradientTape() as tape:
                        if wrt_input:
                            tape.watch(x)
                        y = layer(x, training=True)
                        s = tf.reduce_sum(y)
                    grads = tape.gradient(s, ([x] if wrt_input else []) + layer.trainable_variables)
                    total += tf.add_n([tf.reshape(g, [-1])[0] for g in grads])
                return total

            x = tf.identity(h)
            steps(x, tf.constant(2)).numpy()
            times = []
            for _ in range(repeats):
                t = time.perf_counter()
                steps(x, tf.constant(calls)).numpy()
                times.append((time.perf_counter() - t) / calls)
            seconds = min(times)  # the kernel's speed, least disturbed by other load
            layers.append(
                {
                    "layer": layer.name,
                    "input": list(x.shape[1:]),
                    "ms": round(1e3 * seconds, 3),
                    "gflops_per_sec": round(flops / seconds / 1e9, 1),
                }
            )
        h = layer(h)
    total = sum(item["ms"] for item in layers) / 1e3
    return {"batch": batch, "layers": layers, "kernels_examples_per_sec": round(batch / total, 1)}


def worker_profile(replicas: int, steps: int = 40, traces: int = 3, rounds: int = 6) -> dict:
    """What a step costs, for `step_only` and for distcore's own loop (StepRunner fed by
    inputs.distribute) on the same devices, in one process, and where distcore's extra time goes.

    Step times come from `rounds` rounds of `steps` timed steps (after a short warm-up),
    the contenders taking turns; the fastest of each is kept: like the ceiling (the best matmul
    seen), it is the one least slowed by other load on the machine. Their ratio is what
    the loop and its input cost. The rounds run with no profiler, as the bench's rounds
    do; the traces' own step times are reported beside them.

    Beside the two, each round times distcore's loop fed one cached global batch through the
    iterator training reads (`one_batch`) and the same input consumed alone, with no
    training (`input_alone`): `overhead_breakdown` splits distcore's extra time by them.

    `traces` tf.profiler traces of `steps` steps each (around the timed steps only, so a
    fresh iterator's shuffle-buffer fill and its teardown stay outside) give the compute
    threads' busy time per step and the convolution kernels' part of it; the fastest
    trace of each is kept.
    """
    from . import data as data_lib, devices

    strategy = devices.make_strategy(devices.resolve(replicas=replicas))
    data = data_lib.load()
    loop = Distcore(strategy, data)
    contenders = {
        "step_only": StepOnly(strategy, data),
        "distcore": loop,
        "one_batch": Distcore(strategy, data, one_batch=True, runner=(loop.config, loop.runner)),
    }
    timings = {name: [] for name in contenders}
    alone = []
    for contender in contenders.values():
        contender.measure(10, 2)  # tf.function tracing and graph building, before anything is timed
    contenders["distcore"].input_alone(10)
    for _ in range(rounds):
        for name, contender in contenders.items():
            contender.measure(steps, 2)
            timings[name].append(contender.timing)
        alone.append(contenders["distcore"].input_alone(steps))
    fastest = {name: min(times, key=lambda t: t["wall_ms"]) for name, times in timings.items()}
    out = {"replicas": replicas, "steps": steps, "rounds": rounds, "traces": traces}
    for name, timing in fastest.items():
        out[name] = {key: timing[key] for key in ("python_ms", "cpu_ms", "switches")} | {"step_ms": timing["wall_ms"]}
    for name in ("step_only", "distcore"):
        traced_step, busy, conv = min(profile_trace(contenders[name], steps) for _ in range(traces))
        out[name].update(
            {
                "traced_step_ms": round(1e3 * traced_step, 2),
                "busy_thread_ms_per_step": round(1e3 * busy / steps, 2),
                "conv_ms_per_step": round(1e3 * conv / steps, 2),
                "conv_share_of_busy": round(conv / busy, 3) if busy else None,
            }
        )
    out["input_alone"] = min(alone, key=lambda t: t["wall_ms"])
    out["distcore_step_vs_step_only"] = round(out["distcore"]["step_ms"] / out["step_only"]["step_ms"], 3)
    out["overhead"] = overhead_breakdown(out)
    return out


def overhead_breakdown(profile: dict) -> dict:
    """Where distcore's step time beyond `step_only`'s goes, in ms a global step, from one
    process's fastest rounds (`worker_profile`). The parts add up to the overhead:

    - python_between_calls: the Python around each chunk of steps, beyond step_only's own;
    - distributed_iterator: taking batches through the iterator training reads
      (`inputs.train_iterator`) and the loop's get_next_as_optional, fed one cached batch
      (`one_batch`), against step_only's batch that sits on the devices;
    - data_pipeline: making fresh batches (shuffle, batch, normalise) on top of that, as the
      cores that run the step share that work.

    `iterator_bound` is step_only's step time over the one-cached-batch loop's: the share of
    step_only's rate that a loop taking its batches from that iterator reached with no
    data pipeline at all, so no such loop does better here. `switches` are each one's context
    switches a step (voluntary, involuntary): the iterator's hand-offs between its threads, and
    the compute threads preempted by them.

    `input_alone` (the input consumed with no training) says which kind of cost the input is:
    when it alone takes less than a step_only step, it keeps up, and what it costs is the CPU it
    takes from the step (`extra_cpu_ms`: distcore's CPU a step beyond step_only's); when it takes
    longer, the step waits for it.
    """
    base, loop, fed = profile["step_only"], profile["distcore"], profile["one_batch"]
    inside = {name: t["step_ms"] - t["python_ms"] for name, t in (("base", base), ("loop", loop), ("fed", fed))}
    parts = {
        "python_between_calls_ms": loop["python_ms"] - base["python_ms"],
        "distributed_iterator_ms": inside["fed"] - inside["base"],
        "data_pipeline_ms": inside["loop"] - inside["fed"],
    }
    overhead = loop["step_ms"] - base["step_ms"]
    alone = profile["input_alone"]
    # No part costs less than nothing: one below 0 by more than 2% of a step_only step means other
    # load slowed the rounds it was taken from, and the split says little.
    disturbed = min(overhead, *parts.values()) < -0.02 * base["step_ms"]
    return {
        "step_only_ms": base["step_ms"],
        "distcore_ms": loop["step_ms"],
        "overhead_ms": round(overhead, 3),
        "overhead_share": round(overhead / loop["step_ms"], 3) if loop["step_ms"] else None,
        **{key: round(value, 3) for key, value in parts.items()},
        "largest": max(parts, key=parts.get).removesuffix("_ms"),
        "extra_cpu_ms": round(loop["cpu_ms"] - base["cpu_ms"], 3),
        "input_alone_ms": alone["wall_ms"],
        "input_alone_cpu_ms": alone["cpu_ms"],
        "input_keeps_up": alone["wall_ms"] < base["step_ms"],
        "iterator_bound": round(base["step_ms"] / fed["step_ms"], 3) if fed["step_ms"] else None,
        "switches": {
            name: t.get("switches") for name, t in (("step_only", base), ("one_batch", fed), ("distcore", loop))
        },
        "disturbed": disturbed,
    }


def format_overhead(item: dict, replicas: int) -> str:
    """One line of the report: a replica count's overhead over step_only and its parts."""
    how = (
        "it keeps up, so it costs the CPU it takes from the step"
        if item["input_keeps_up"]
        else "slower than the step: the step waits for it"
    )
    switches = item.get("switches") or {}  # (reports of older versions have none)
    return (
        f"{replicas:>8} distcore {item['distcore_ms']:.2f} ms = step_only {item['step_only_ms']:.2f} "
        f"+ {item['overhead_ms']:.2f} ({100 * (item['overhead_share'] or 0):.0f}% of distcore's step): "
        f"iterator {item['distributed_iterator_ms']:.2f}, data pipeline "
        f"{item['data_pipeline_ms']:.2f}, Python between calls {item['python_between_calls_ms']:.2f}; "
        f"CPU {item['extra_cpu_ms']:+.2f} ms a step; the input alone {item['input_alone_ms']:.2f} ms a step "
        f"(CPU {item['input_alone_cpu_ms']:.2f}): {how}"
        + (
            "; context switches a step (voluntary/involuntary): "
            + ", ".join(f"{name} {v}/{i}" for name, (v, i) in switches.items())
            if switches and all(switches.values())
            else ""
        )
        + ("; DISTURBED: a part below 0, other load slowed these rounds" if item["disturbed"] else "")
    )


def step_seconds(contender, steps: int, warmup: int = 2, timed=contextlib.nullcontext) -> float:
    """Seconds a global step takes over `steps` timed steps of `contender`."""
    rate, _ = contender.measure(steps, warmup, timed=timed)
    return PER_REPLICA_BATCH * contender.strategy.num_replicas_in_sync / rate


def profile_trace(contender, steps: int) -> tuple[float, float, float]:
    """One tf.profiler trace around `steps` timed steps: seconds a global step, the
    compute threads' busy seconds, and the convolution kernels' seconds."""
    import glob

    import tensorflow as tf
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    @contextlib.contextmanager
    def traced():
        tf.profiler.experimental.start(logdir)
        try:
            yield
        finally:
            tf.profiler.experimental.stop()

    with tempfile.TemporaryDirectory() as logdir:
        step = step_seconds(contender, steps, timed=traced)
        space = xplane_pb2.XSpace()
        space.ParseFromString(Path(glob.glob(f"{logdir}/**/*.xplane.pb", recursive=True)[0]).read_bytes())
    busy = conv = 0.0
    for plane in space.planes:
        names = {key: meta.name for key, meta in plane.event_metadata.items()}
        for line in plane.lines:
            for event in line.events:
                name = names.get(event.metadata_id, "")
                if name == "ExecutorState::Process":  # a thread running graph ops; ops nest inside
                    busy += event.duration_ps / 1e12
                elif is_conv_kernel(name):
                    conv += event.duration_ps / 1e12
    return step, busy, conv


def is_conv_kernel(event_name: str) -> bool:
    """Whether a profiler event "<op name>:<kernel>" is a convolution kernel: Conv2D's or
    DepthwiseConv2dNative's, forward or gradient. Layer scopes in the op name ("conv2d_1/Relu")
    do not count."""
    return "conv2d" in event_name.rpartition(":")[2].lower()


def worker_split() -> dict:
    from . import devices
    from .config import SplitConfig

    devices.configure(8)
    names = tuple(f"cpu:{i}" for i in range(8))
    config = SplitConfig(examples=512, global_batch=8, devices=names)
    # Timed as the app's planner answers: up to the finished plan. The planner drops the
    # used iterator after answering; that teardown is timed on its own.
    plan, first, first_teardown = timed_plan(config)
    _, second, second_teardown = timed_plan(config)
    t = time.perf_counter()
    strategy = devices.make_strategy(names)
    make_strategy = time.perf_counter() - t
    _, given, given_teardown = timed_plan(config, strategy)
    return {
        "steps": len(plan["steps"]),
        "replicas": 8,
        "first_plan_seconds": round(first, 3),
        "second_plan_seconds": round(second, 3),
        "make_strategy_seconds": round(make_strategy, 3),
        "plan_with_given_strategy_seconds": round(given, 3),
        "teardown_after_answer_seconds": [round(x, 3) for x in (first_teardown, second_teardown, given_teardown)],
    }


def timed_plan(config, strategy=None) -> tuple[dict, float, float]:
    """A split plan, its time to the finished plan, and the time to drop its iterator afterwards."""
    from . import split

    spent = []
    t = time.perf_counter()
    plan = split.plan(config, strategy=strategy, spent=spent)
    answered = time.perf_counter() - t
    t = time.perf_counter()
    spent.clear()
    return plan, answered, time.perf_counter() - t


def worker_serve(
    name: str, replicas: int, steps: int, warmup: int, task: str = "classifier", global_batch=None
) -> None:
    """Build one contender, trace it, say so; then measure once per stdin line
    `STEPS WARMUP`, answering with one JSON line; exit when stdin closes."""
    import keras
    import tensorflow as tf

    from . import data as data_lib, devices

    names = devices.resolve(replicas=replicas)  # GPUs when there are enough, else logical CPUs
    strategy = devices.make_strategy(names)
    data = data_lib.load()
    kinds = {"distcore": Distcore, "tutorial": Tutorial, "keras_fit": KerasFit, "step_only": StepOnly, "guide": Guide}
    own = {}  # the classifier's contenders build their own StepRunner
    if task == "gan":
        own = (
            {"global_batch": global_batch}
            if name == "guide"
            else {"runner": step_runner(strategy, "gan", global_batch)}
        )
    contender = kinds[name](strategy, data, **own)
    contender.measure(min(steps, 20), min(warmup, 5))  # trace and build outside the timed rounds
    threads = tf.config.threading.get_intra_op_parallelism_threads()
    info = {
        "devices": list(names),
        "intra_op_threads": threads or "TensorFlow default",
        "strategy": type(strategy.extended._cross_device_ops).__name__,
        "optimizer": type(contender.optimizer).__name__,
        "conv2d": type(contender.model.layers[0]).__module__.split(".")[0],  # "keras" or "distcore"
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "gpus": [d.name for d in tf.config.list_physical_devices("GPU")],
    }
    if name == "keras_fit":
        info["jit_compile"] = bool(contender.model.jit_compile)
    if name == "distcore":
        info["steps_per_loop"] = contender.config.steps_per_loop
    print(json.dumps(info), flush=True)
    for line in sys.stdin:
        steps, warmup = (int(x) for x in line.split())
        rate, cpu_us = contender.measure(steps, warmup)
        print(json.dumps({"rate": rate, "cpu_us": cpu_us}), flush=True)


class Clock:
    """Wall time and this process's CPU time (all threads) since start; CPU time per
    example is far less disturbed by other programs on the machine than wall time."""

    def __init__(self):
        self.wall, self.cpu = time.perf_counter(), _cpu_seconds()
        self.usage = resource.getrusage(resource.RUSAGE_SELF)

    def rate(self, examples: int) -> tuple[float, float]:
        wall, cpu = time.perf_counter() - self.wall, _cpu_seconds() - self.cpu
        return examples / wall, 1e6 * cpu / max(examples, 1)

    def per_step(self, steps: int, in_calls: float | None = None) -> dict:
        """ms a step since start: wall, CPU (all threads) and, given the `in_calls` seconds spent
        in the compiled calls (and their one sync each), the Python outside them."""
        wall, cpu = time.perf_counter() - self.wall, _cpu_seconds() - self.cpu
        out = {"wall_ms": round(1e3 * wall / steps, 3), "cpu_ms": round(1e3 * cpu / steps, 3)}
        # The process's context switches a step: voluntary (a thread waits for another's hand-off)
        # and involuntary (a runnable thread preempted, as when input threads and compute threads
        # share the cores).
        usage = resource.getrusage(resource.RUSAGE_SELF)
        out["switches"] = [
            round((usage.ru_nvcsw - self.usage.ru_nvcsw) / steps, 1),
            round((usage.ru_nivcsw - self.usage.ru_nivcsw) / steps, 1),
        ]
        if in_calls is not None:
            out["python_ms"] = round(1e3 * (wall - in_calls) / steps, 3)
        return out


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def step_runner(strategy, task: str = "classifier", global_batch: int | None = None):
    """distcore's default TrainConfig for the strategy's devices and the task, and its StepRunner
    (the task built as the Controller builds it)."""
    from . import tasks
    from .config import TrainConfig
    from .loop import StepRunner

    names = tuple(d.split("/")[-1].lower().replace("device:", "") for d in strategy.extended.worker_devices)
    global_batch = global_batch or PER_REPLICA_BATCH * strategy.num_replicas_in_sync
    config = TrainConfig(devices=names, global_batch=global_batch, task=task)
    return config, StepRunner(strategy, config, tasks.from_config(config))


def named_parts(task) -> tuple:
    """The model and optimizer the report names: the classifier's, or the GAN's discriminator's
    (both of the GAN's optimizers are Keras's Adam)."""
    if hasattr(task, "discriminator"):
        return task.discriminator, task.d_optimizer
    return task.model, task.optimizer


class Distcore:
    """StepRunner + inputs.distribute, as controller.Controller.run_epoch uses them. With
    `one_batch`, the same loop and iterator fed one global batch of examples,
    cached and repeated: the iterator's cost without the data pipeline's work. `runner`: another
    Distcore's (config, StepRunner), whose traced step it shares."""

    def __init__(self, strategy, data, one_batch: bool = False, runner=None):
        self.strategy, self.data, self.one_batch = strategy, data, one_batch
        self.config, self.runner = runner or step_runner(strategy)
        self.model, self.optimizer = named_parts(self.runner.task)
        self.epoch = 0
        self.timing = self.consume = None

    def dataset(self, steps: int):
        """The next epoch's distributed dataset, repeated when `steps` outrun an epoch."""
        from . import inputs
        from .controller import train_examples

        self.epoch += 1
        make = train_examples(self.config, self.data, self.epoch, 0)
        if self.one_batch:
            make = (lambda m: lambda: m().take(self.config.global_batch).cache().repeat())(make)
        elif steps > self.config.steps_per_epoch():
            make = (lambda m: lambda: m().repeat())(make)
        return inputs.distribute(
            self.strategy,
            make,
            global_batch=self.config.global_batch,
            api=self.config.api,
            policy=self.config.policy,
            drop_remainder=self.config.drop_remainder,
            transform=inputs.transform_for(self.data),
        )

    def measure(self, steps: int, warmup: int, timed=contextlib.nullcontext, values=None) -> tuple[float, float]:
        """Examples/s and CPU us an example over `steps` steps after `warmup`; each step's metrics
        (the warm-up's first) are appended to `values` when given."""
        import tensorflow as tf

        from . import inputs

        iterator = inputs.train_iterator(self.strategy, self.dataset(steps + warmup))
        in_calls = [0.0]

        def run_steps(n):
            done = examples = 0
            while done < n:
                started = time.perf_counter()
                losses, counts = self.runner.train_steps(
                    iterator, tf.constant(min(self.config.steps_per_loop, n - done), tf.int32)
                )
                losses, counts = losses.numpy(), counts.numpy()  # the controller's one sync per chunk
                in_calls[0] += time.perf_counter() - started
                if len(counts) == 0:
                    raise RuntimeError("distcore ran out of data")
                if values is not None:
                    values.extend(losses.tolist())
                done += len(counts)
                examples += int(counts.sum())
            return examples

        run_steps(warmup)
        with timed():
            clock = Clock()
            in_calls[0] = 0.0
            examples = run_steps(steps)
            self.timing = clock.per_step(steps, in_calls[0])
            return clock.rate(examples)

    def input_alone(self, steps: int, warmup: int = 2) -> dict:
        """The same distributed input consumed by the same kind of loop with no training:
        ms of wall and CPU time a global step."""
        import tensorflow as tf

        from . import inputs
        from .loop import SUM

        if self.consume is None:
            strategy = self.strategy

            @tf.function
            def consume(iterator, n):
                count = tf.constant(0)
                for _ in tf.range(n):
                    optional = inputs.get_next_as_optional(strategy, iterator)
                    if not optional.has_value():
                        break
                    _, labels = optional.get_value()
                    count += strategy.reduce(SUM, strategy.run(lambda y: tf.shape(y)[0], args=(labels,)), axis=None)
                return count

            self.consume = consume
        iterator = inputs.train_iterator(self.strategy, self.dataset(steps + warmup))

        def run_steps(n):
            done = 0
            while done < n:
                k = min(self.config.steps_per_loop, n - done)
                self.consume(iterator, tf.constant(k)).numpy()
                done += k

        run_steps(warmup)
        clock = Clock()
        run_steps(steps)
        return clock.per_step(steps)


class Tutorial:
    """The custom-training tutorial's training loop, as written."""

    def __init__(self, strategy, data):
        import keras
        import numpy as np
        import tensorflow as tf

        from .model import create_model

        self.strategy = strategy
        # The tutorial's preprocessing: a channel axis, then float32 in [0, 1].
        self.train_images = data.train_images[..., None] / np.float32(255)
        self.train_labels = data.train_labels
        self.BUFFER_SIZE = len(self.train_images)
        self.GLOBAL_BATCH_SIZE = PER_REPLICA_BATCH * strategy.num_replicas_in_sync
        GLOBAL_BATCH_SIZE = self.GLOBAL_BATCH_SIZE
        with strategy.scope():
            loss_object = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

            def compute_loss(labels, predictions):
                per_example_loss = loss_object(labels, predictions)
                return tf.nn.compute_average_loss(per_example_loss, global_batch_size=GLOBAL_BATCH_SIZE)

            train_accuracy = keras.metrics.SparseCategoricalAccuracy(name="train_accuracy")
        keras.utils.set_random_seed(0)
        with strategy.scope():
            model = create_model("cnn", keras_conv=True)
            optimizer = keras.optimizers.Adam()
            optimizer.build(model.trainable_variables)  # Keras 3 with 2+ replicas
        self.model, self.optimizer = model, optimizer

        def train_step(inputs):
            images, labels = inputs
            with tf.GradientTape() as tape:
                predictions = model(images, training=True)
                loss = compute_loss(labels, predictions)
            gradients = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(gradients, model.trainable_variables))
            train_accuracy.update_state(labels, predictions)
            return loss

        @tf.function
        def distributed_train_step(dataset_inputs):
            per_replica_losses = strategy.run(train_step, args=(dataset_inputs,))
            return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)

        self.distributed_train_step = distributed_train_step

    def measure(self, steps: int, warmup: int) -> float:
        import tensorflow as tf

        train_dataset = tf.data.Dataset.from_tensor_slices((self.train_images, self.train_labels)).shuffle(
            self.BUFFER_SIZE
        )
        if steps + warmup > len(self.train_labels) // self.GLOBAL_BATCH_SIZE:
            train_dataset = train_dataset.repeat()
        train_dataset = train_dataset.batch(self.GLOBAL_BATCH_SIZE)
        train_dist_dataset = self.strategy.experimental_distribute_dataset(train_dataset)
        iterator = iter(train_dist_dataset)  # what `for x in train_dist_dataset` does

        def run_steps(n):
            total_loss, num_batches = 0.0, 0
            for x in iterator:
                total_loss += self.distributed_train_step(x)
                num_batches += 1
                if num_batches == n:
                    break
            float(total_loss)  # the tutorial prints the epoch's loss: one sync at the end
            return num_batches * self.GLOBAL_BATCH_SIZE

        run_steps(warmup)
        clock = Clock()
        return clock.rate(run_steps(steps))


class KerasFit:
    """Model.fit under the same strategy, fed distcore's input pipeline."""

    def __init__(self, strategy, data):
        import keras

        from .model import create_model

        self.strategy, self.data = strategy, data
        self.global_batch = PER_REPLICA_BATCH * strategy.num_replicas_in_sync
        keras.utils.set_random_seed(0)
        with strategy.scope():
            self.model = create_model("cnn", keras_conv=True)
            self.model.compile(
                optimizer=keras.optimizers.Adam(),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=[keras.metrics.SparseCategoricalAccuracy()],
            )
        self.optimizer = self.model.optimizer
        self.epoch = 0

    def measure(self, steps: int, warmup: int) -> float:
        import keras
        import tensorflow as tf

        from . import inputs

        self.epoch += 1
        ds = inputs.in_memory(self.data.train_images, self.data.train_labels, seed=0, epoch=self.epoch)
        if steps + warmup > len(self.data.train_labels) // self.global_batch:
            ds = ds.repeat()
        ds = ds.batch(self.global_batch).map(inputs.normalize, num_parallel_calls=tf.data.AUTOTUNE)
        ds = ds.prefetch(tf.data.AUTOTUNE)
        times = {}

        class Timer(keras.callbacks.Callback):
            async_safe = True  # only begin/epoch hooks: keeps Keras's async batch-end dispatch

            def on_train_batch_begin(self, batch, logs=None):
                if batch == warmup:  # the warm-up steps' calls have returned
                    times["clock"] = Clock()

            def on_epoch_end(self, epoch, logs=None):
                times["rate"] = times["clock"].rate(steps * outer.global_batch)

        outer = self
        self.model.fit(ds, epochs=1, steps_per_epoch=warmup + steps, verbose=0, shuffle=False, callbacks=[Timer()])
        return times["rate"]


class Guide:
    """The loop-from-scratch guide's GAN loop, as written, under the strategy: its `@tf.function`
    train_step run by `strategy.run` once a step, from a Python for loop over the distributed
    dataset. Its data is the guide's (float32 images in [0, 1], from_tensor_slices, shuffle(1024),
    batch), here Fashion-MNIST's training images. Changed only where distribution or current
    Keras requires: each replica generates as many images as it has real ones (the guide's
    `batch_size` is the global batch, which every replica would otherwise generate), each loss is
    divided by its global number of examples (`reduction="none"`, compute_average_loss), shapes are
    dynamic (`tf.shape`), and the optimizers are built inside the scope."""

    def __init__(self, strategy, data, global_batch: int):
        import keras
        import numpy as np
        import tensorflow as tf

        from .tasks import LATENT, gan_models

        self.strategy, self.batch_size = strategy, global_batch
        all_digits = data.train_images.astype("float32") / 255.0
        self.all_digits = np.reshape(all_digits, (-1, 28, 28, 1))
        latent_dim = LATENT
        keras.utils.set_random_seed(0)
        with strategy.scope():
            discriminator, generator = gan_models()
            d_optimizer = keras.optimizers.Adam(learning_rate=0.0003)
            g_optimizer = keras.optimizers.Adam(learning_rate=0.0004)
            d_optimizer.build(discriminator.trainable_weights)  # Keras 3 with 2+ replicas
            g_optimizer.build(generator.trainable_weights)
            loss_fn = keras.losses.BinaryCrossentropy(from_logits=True, reduction="none")
        self.model, self.optimizer = discriminator, d_optimizer

        @tf.function
        def train_step(real_images):
            batch_size = tf.shape(real_images)[0]  # this replica's share of the global batch
            random_latent_vectors = tf.random.normal(shape=(batch_size, latent_dim))
            generated_images = generator(random_latent_vectors)
            combined_images = tf.concat([generated_images, real_images], axis=0)
            labels = tf.concat([tf.ones((batch_size, 1)), tf.zeros((batch_size, 1))], axis=0)
            labels += 0.05 * tf.random.uniform(tf.shape(labels))
            with tf.GradientTape() as tape:
                predictions = discriminator(combined_images)
                d_loss = tf.nn.compute_average_loss(loss_fn(labels, predictions), global_batch_size=2 * global_batch)
            grads = tape.gradient(d_loss, discriminator.trainable_weights)
            d_optimizer.apply_gradients(zip(grads, discriminator.trainable_weights))

            random_latent_vectors = tf.random.normal(shape=(batch_size, latent_dim))
            misleading_labels = tf.zeros((batch_size, 1))
            with tf.GradientTape() as tape:
                predictions = discriminator(generator(random_latent_vectors))
                g_loss = tf.nn.compute_average_loss(
                    loss_fn(misleading_labels, predictions), global_batch_size=global_batch
                )
            grads = tape.gradient(g_loss, generator.trainable_weights)
            g_optimizer.apply_gradients(zip(grads, generator.trainable_weights))
            return d_loss, g_loss, generated_images

        self.train_step = train_step

    def measure(self, steps: int, warmup: int, values=None) -> tuple[float, float]:
        """As Distcore.measure; `values` gets each step's (d_loss, g_loss), one sync a step."""
        import tensorflow as tf

        from .loop import SUM

        dataset = tf.data.Dataset.from_tensor_slices(self.all_digits).shuffle(buffer_size=1024)
        if steps + warmup > len(self.all_digits) // self.batch_size:
            dataset = dataset.repeat()
        dataset = self.strategy.experimental_distribute_dataset(dataset.batch(self.batch_size))
        iterator = iter(dataset)  # what `for real_images in dataset` does

        def run_steps(n):
            if n == 0:
                return 0
            for step, real_images in enumerate(iterator):
                d_loss, g_loss, generated_images = self.strategy.run(self.train_step, args=(real_images,))
                if values is not None:
                    values.append([float(self.strategy.reduce(SUM, x, axis=None)) for x in (d_loss, g_loss)])
                if step + 1 == n:
                    break
            float(self.strategy.reduce(SUM, d_loss, axis=None))  # the guide prints the losses: one sync at the end
            return n * self.batch_size

        run_steps(warmup)
        clock = Clock()
        return clock.rate(run_steps(steps))


def worker_gan_trend(steps: int, global_batch: int) -> dict:
    """Both GAN loops on 1 replica, from the same initial weights (seed 0), `steps` steps each:
    their mean d_loss and g_loss over quarters of the steps. The random draws and the order of
    the examples differ (the guide draws statefully and shuffles in a 1024-example buffer), so the
    numbers compare as trends, not digit by digit."""
    from . import data as data_lib, devices

    strategy = devices.make_strategy(devices.resolve(replicas=1))
    data = data_lib.load()
    curves = {}
    for name, make in (
        ("distcore", lambda: Distcore(strategy, data, runner=step_runner(strategy, "gan", global_batch))),
        ("guide", lambda: Guide(strategy, data, global_batch)),
    ):
        curves[name] = []
        make().measure(steps, 0, values=curves[name])
    bounds = sorted({0, *(round(steps * q / 4) for q in (1, 2, 3, 4))})
    windows = [
        {
            "steps": f"{a + 1}-{b}",
            **{
                name: {
                    metric: round(statistics.fmean(v[i] for v in curve[a:b]), 4)
                    for i, metric in enumerate(("d_loss", "g_loss"))
                }
                for name, curve in curves.items()
            },
        }
        for a, b in zip(bounds, bounds[1:])
    ]
    return {
        "steps": steps,
        "global_batch": global_batch,
        "replicas": 1,
        "data": data.name,
        "first_step": {name: dict(zip(("d_loss", "g_loss"), curve[0])) for name, curve in curves.items()},
        "windows": windows,
        "curves": curves,
    }


class StepOnly:
    """distcore's replica step on one batch already on the devices, K steps a call:
    the compute the loop cannot go below (no input pipeline, no iterator)."""

    def __init__(self, strategy, data, runner=None):
        import tensorflow as tf

        from . import inputs
        from .loop import SUM

        self.strategy = strategy
        config, self.runner = runner or step_runner(strategy)
        self.model, self.optimizer = named_parts(self.runner.task)
        self.k = config.steps_per_loop
        self.n = n = config.global_batch // strategy.num_replicas_in_sync  # each replica's piece
        images, labels = inputs.normalize(data.train_images[:n], data.train_labels[:n])
        self.batch = strategy.experimental_distribute_values_from_function(
            lambda ctx: (tf.identity(images), tf.identity(labels))
        )

        @tf.function
        def steps(batch, n):
            total = tf.constant(0.0)
            for i in tf.range(n):
                values, _ = strategy.run(self.runner.replica_train_step, args=(batch, tf.cast(i, tf.int64) + 1))
                total += strategy.reduce(SUM, values, axis=None)[0]
            return total

        self.steps = steps

    def measure(self, steps: int, warmup: int, timed=contextlib.nullcontext) -> tuple[float, float]:
        import tensorflow as tf

        in_calls = [0.0]

        def run_steps(n):
            done = 0
            while done < n:
                k = min(self.k, n - done)
                started = time.perf_counter()
                self.steps(self.batch, tf.constant(k)).numpy()
                in_calls[0] += time.perf_counter() - started
                done += k

        run_steps(warmup)
        with timed():
            clock = Clock()
            in_calls[0] = 0.0
            run_steps(steps)
            self.timing = clock.per_step(steps, in_calls[0])
            return clock.rate(steps * self.n * self.strategy.num_replicas_in_sync)


def worker_main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m distcore.bench")
    parser.add_argument(
        "--worker", required=True, choices=("ceiling", "split", "serve", "profile", "sysmetrics", "gan_trend")
    )
    parser.add_argument("--contender", choices=(*MEASURED, "guide"))
    parser.add_argument("--task", default="classifier", choices=("classifier", "gan"))
    parser.add_argument("--global-batch", type=int, default=GAN_GLOBAL_BATCH)
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS)
    parser.add_argument("--warmup", type=int, default=DEFAULT_WARMUP)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-profile", action="store_true")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if args.worker == "serve":
        worker_serve(args.contender, args.replicas, args.steps, args.warmup, args.task, args.global_batch)
        return 0
    if args.worker == "split":
        out = worker_split()
    elif args.worker == "profile":
        out = worker_profile(args.replicas, args.steps, traces=1 if args.quick else 3, rounds=1 if args.quick else 6)
    elif args.worker == "gan_trend":
        out = worker_gan_trend(args.steps, args.global_batch)
    elif args.worker == "sysmetrics":  # the system-metrics sampler's CPU per sample, TensorBoard scalars included
        from .sysmetrics import measure_cost_with_tensorboard

        out = measure_cost_with_tensorboard()
    else:
        out = worker_ceiling(quick=args.quick, profile=not args.no_profile)
    out["worker_peak_rss_gib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(worker_main())
