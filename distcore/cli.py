"""`distcore` (`python -m distcore`): devices, split, train, cluster, evaluate, export, loss-check, bench, sweep, runs.

Errors a user can cause print `error: MESSAGE` on stderr (and `{"error": MESSAGE}`
on stdout with --json) and exit with status 2. Tracebacks are for bugs.
TensorFlow is imported inside each command, after the device set is known,
because the process's logical devices can only be configured once.

Internal entry points stay callable and out of --help, which lists user commands only:
`planner` (the app's split-plan service) and `split --multi-worker` (one worker of
`split --workers`); bench's workers are `python -m distcore.bench --worker`.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import functools
import json
import os
import select
import signal
import sys
import time

from . import cluster, devices, jobs, runs, stopping
from .config import (
    APIS,
    OPTIMIZERS,
    POLICIES,
    DistcoreError,
    SplitConfig,
    TrainConfig,
    UnevenBatch,
    check_data,
    check_int,
)

# TensorFlow's C++ warnings: split plans capture and show them (an AUTO-to-DATA
# fallback is one); other commands ask for errors only. TensorFlow 2.21 still prints
# absl's "All log messages before absl::InitializeLog()" and oneDNN's notice, at any level.
WARNINGS_SHOWN = ("split", "planner")


class UsageError(Exception):
    """A command line argparse refused: its message, and the command's usage text."""

    def __init__(self, message: str, usage: str):
        super().__init__(message)
        self.usage = usage


class Parser(argparse.ArgumentParser):
    """Raises UsageError instead of exiting, so main() can also print {"error": ...} for --json.
    No abbreviated flags: `cluster --replicas 2` would be read as --replicas-per-worker 2."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **{**kwargs, "allow_abbrev": False})

    def error(self, message):
        raise UsageError(message, self.format_usage() + f"{self.prog}: error: {message}\n")


def run_dir_arg(text: str) -> str:
    try:
        return str(runs.run_path(text))
    except DistcoreError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def add_devices(parser, required: bool = False, default_replicas: int = 2):
    group = parser.add_mutually_exclusive_group(required=required)
    group.add_argument(
        "--replicas",
        help=f"number of replicas (GPUs if there are enough, else logical CPUs; default {default_replicas})",
    )
    group.add_argument("--devices", help="explicit device list, e.g. cpu:0,cpu:1 or gpu:0,gpu:1")
    return group


def add_train_flags(p):
    p.add_argument(
        "--run-dir", required=True, type=run_dir_arg, help="the run directory (created; must be new unless --resume)"
    )
    p.add_argument("--global-batch", help="global batch size (default 64)")
    p.add_argument("--epochs", help="epochs (default 1)")
    p.add_argument("--max-steps", help="stop after this many global steps (default: no limit)")
    p.add_argument("--seed", help="seed for weights and shuffling (default 0)")
    p.add_argument("--steps-per-loop", help="steps per tf.function call (default 20)")
    p.add_argument("--checkpoint-every", help="checkpoint every N steps (default: epoch ends only)")
    p.add_argument("--keep-checkpoints", help="keep the newest N checkpoints, deleting older ones (default 0: all)")
    p.add_argument(
        "--task",
        help="classifier (default), gan (the training-loop guide's), or module:function returning your distcore.Task",
    )
    p.add_argument(
        "--model", help="cnn (tutorial, default), mlp (training-loop guide), or module:function returning a Keras model"
    )
    p.add_argument(
        "--data", help="fashion-mnist (default), mnist, or an .npz file with x_train, y_train, x_test, y_test"
    )
    p.add_argument("--optimizer", type=str.lower, choices=OPTIMIZERS, help="adam (default) or sgd")
    p.add_argument("--learning-rate", help="learning rate (default 0.001)")
    p.add_argument("--l2", help="L2 weight penalty (default 0)")
    p.add_argument("--policy", type=str.lower, choices=POLICIES, help="tf.data AutoShardPolicy (default auto)")
    p.add_argument("--api", type=str.lower, choices=APIS, help="input API (default dataset)")
    p.add_argument("--drop-remainder", action="store_true", default=None, help="drop partial last batches")
    p.add_argument("--train-examples", help="use the first N training examples (default: all)")
    p.add_argument("--test-examples", help="use the first N test examples (default: all)")
    p.add_argument("--data-dir", help="folder with the four Fashion-MNIST .gz files")
    p.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --run-dir")
    p.add_argument("--json", action="store_true", help="print metrics records as JSON lines")


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = Parser(prog="python -m distcore", description=__doc__.split("\n")[0])
    parser.add_argument("--version", action="version", version=f"distcore {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    parser.commands = sub.choices  # name -> the command's parser

    p = sub.add_parser("devices", help="list the devices this machine offers")
    p.add_argument("--json", action="store_true", help="print one JSON object")

    p = sub.add_parser("split", help="show which example ids each replica gets, step by step")
    p.add_argument("--examples", required=True, help="dataset size N (ids 0..N-1)")
    p.add_argument("--global-batch", required=True, help="global batch size G")
    add_devices(p)
    p.add_argument("--policy", default="auto", type=str.lower, choices=POLICIES, help="tf.data AutoShardPolicy")
    p.add_argument(
        "--api",
        default="dataset",
        type=str.lower,
        choices=APIS,
        help="dataset: experimental_distribute_dataset; function: distribute_datasets_from_function",
    )
    p.add_argument("--drop-remainder", action="store_true", help="drop the last partial global batch")
    p.add_argument("--files", default="0", help="write the ids into F TFRecord files (0: in memory)")
    p.add_argument(
        "--shuffle-seed",
        help="also give Fashion-MNIST row numbers in the order epoch 1 of a training run with this --seed reads them",
    )
    p.add_argument(
        "--no-map",
        action="store_true",
        help="end the pipeline at batch(), as the distributed-input "
        "guide's examples do (by default a map follows the batch, as in training; under FILE and "
        "OFF TensorFlow then cuts batches into other pieces)",
    )
    p.add_argument("--workers", default="1", help="run the plan on W worker processes (MultiWorkerMirroredStrategy)")
    p.add_argument("--multi-worker", action="store_true", help=argparse.SUPPRESS)  # one worker of --workers
    p.add_argument("--json", action="store_true", help="print one JSON object")

    # No help=: argparse then leaves the command out of --help's list (metavar hides the choices).
    sub.add_parser("planner", description="serve split plans as JSON lines on stdin/stdout (used by the app)")

    p = sub.add_parser("train", help="train with a MirroredStrategy custom loop into a run directory")
    add_train_flags(p)
    add_devices(p)
    p.add_argument(
        "--multi-worker",
        action="store_true",
        help="be one worker of the TF_CONFIG cluster (MultiWorkerMirroredStrategy); worker 0 writes --run-dir",
    )
    p.add_argument(
        "--engine",
        default="local",
        type=str.lower,
        choices=("local", "ray"),
        help="local (default): this process; ray: --workers Ray Train workers (MultiWorkerMirroredStrategy)",
    )
    p.add_argument("--workers", help="with --engine ray: number of Ray Train workers (2 or more)")
    p.add_argument(
        "--ray-address", help="with --engine ray: the Ray cluster to join (default: a local Ray on 127.0.0.1)"
    )
    p.add_argument(
        "--max-failures",
        help="with --engine ray: restarts of the workers after a worker fails, each resuming from the newest "
        "checkpoint (default 3; 0: none)",
    )

    p = sub.add_parser("cluster", help="train on W local worker processes (MultiWorkerMirroredStrategy)")
    add_train_flags(p)
    p.add_argument("--workers", required=True, help="number of worker processes (2 or more)")
    p.add_argument(
        "--replicas-per-worker",
        default="1",
        help="replicas in each worker: 1 on CPU; on GPUs, this many GPUs per worker",
    )

    p = sub.add_parser("evaluate", help="restore a checkpoint and evaluate it on the test set")
    p.add_argument("--run-dir", required=True, type=run_dir_arg, help="the run directory to evaluate")
    p.add_argument("--checkpoint", help="checkpoint name, e.g. ckpt-500 (default: the newest intact one)")
    group = add_devices(p, default_replicas=1)  # (a MirroredStrategy on one device; --no-strategy: none)
    group.add_argument("--no-strategy", action="store_true", help="restore and evaluate with no strategy")
    p.add_argument("--details", action="store_true", help="add a confusion matrix and sample predictions")
    p.add_argument("--data-dir", help="folder with the four Fashion-MNIST .gz files (default: the run's)")
    p.add_argument("--json", action="store_true", help="print one JSON object")

    p = sub.add_parser("export", help="write a checkpoint's model as a .keras file or a SavedModel")
    p.add_argument("--run-dir", required=True, type=run_dir_arg, help="the run directory")
    p.add_argument("--checkpoint", help="checkpoint name, e.g. ckpt-500 (default: the newest intact one)")
    p.add_argument("--out", required=True, help="the file to write (model.keras), or a folder for --format savedmodel")
    p.add_argument("--format", type=str.lower, choices=("keras", "savedmodel"), help="keras (default) or savedmodel")
    p.add_argument("--json", action="store_true", help="print one JSON object")

    p = sub.add_parser("loss-check", help="one batch's loss: single device vs distributed vs common mistakes")
    add_devices(p)
    p.add_argument(
        "--global-batch",
        default="64",
        help="global batch size G (default 64); the batch is the first G test images, or --examples of them",
    )
    p.add_argument(
        "--examples", help="examples in the batch, fewer than G for a partial last batch (default: G, a full batch)"
    )
    p.add_argument("--seed", default="0", help="seed for the model's initial weights (default 0)")
    p.add_argument("--data-dir", help="folder with the four Fashion-MNIST .gz files")
    p.add_argument("--json", action="store_true", help="print one JSON object")

    p = sub.add_parser("bench", help="throughput vs the tutorial loop and Keras fit, memory, latency")
    from .bench import add_arguments as add_bench_arguments  # no TensorFlow at import

    add_bench_arguments(p)
    from .runcommands import add_parsers as add_run_commands  # sweep, runs (no plotly at import)

    add_run_commands(sub)
    return parser


def device_names(args, default_replicas=2):
    if getattr(args, "devices", None) is not None:  # even "" (an empty set is an error, not a default)
        return devices.resolve(devices=args.devices)
    return devices.resolve(replicas=args.replicas if args.replicas is not None else default_replicas)


def print_json(data) -> None:
    print(json.dumps(data), flush=True)


def output_lost(err: OSError) -> bool:
    """True, with stdout and stderr sent to /dev/null from now on, when `err` is a write to a
    reader that left (`| head -3`) or to a terminal that closed: there is no one to tell."""
    if not isinstance(err, BrokenPipeError) and err.errno != errno.EIO:
        return False
    devnull = os.open(os.devnull, os.O_WRONLY)
    for fd in (1, 2):
        os.dup2(devnull, fd)
    return True


# The status a shell reports for a writer whose reader left (`yes | head` under pipefail):
# Python ignores SIGPIPE and raises instead, so a command that lost its output ends with it.
OUTPUT_LOST = 128 + signal.SIGPIPE


def keep_training(on_record, stop):
    """`on_record` for a training run whose output may lose its reader: the run then stops
    at the end of its loop, with a checkpoint, as for Ctrl-C, and exits OUTPUT_LOST, not 0 as
    if finished. Raised instead, the error would fail it at once, with its status left
    "running" (the failure's own record hits the same pipe)."""

    def guarded(record):
        try:
            on_record(record)
        except OSError as err:
            if not output_lost(err):
                raise
            if stop.signum is None:  # (a signal that came first keeps its own status)
                stop.signum = signal.SIGPIPE
            stop.set()

    return guarded


def cmd_devices(args) -> int:
    info = devices.inventory()
    if args.json:
        print_json(info)
    else:
        print(f"TensorFlow {info['tensorflow']}; {info['cpu_cores']} CPU cores")
        print("GPUs: " + (", ".join(info["gpus"]) or "none"))
        most = info["max_logical_cpus"]
        print(f"CPU: can be split into up to {most} logical devices (cpu:0 ... cpu:{most - 1})")
        print("default device set: " + ",".join(info["default"]))
    return 0


def split_config(request: dict, names) -> SplitConfig:
    return SplitConfig(
        examples=request.get("examples"),
        global_batch=request.get("global_batch"),
        devices=tuple(names),
        policy=request.get("policy", "auto"),
        api=request.get("api", "dataset"),
        drop_remainder=request.get("drop_remainder", False),
        files=request.get("files", 0),
        workers=request.get("workers", 1),
        shuffle_seed=request.get("shuffle_seed"),
        map_after_batch=request.get("map_after_batch", True),
        rows=request.get("rows") or SplitConfig.rows,
    )


def cmd_split(args) -> int:
    from . import inputs, split

    request = {
        "examples": args.examples,
        "global_batch": args.global_batch,
        "policy": args.policy,
        "api": args.api,
        "drop_remainder": args.drop_remainder,
        "files": args.files,
        "shuffle_seed": args.shuffle_seed,
        "map_after_batch": not args.no_map,
    }
    workers = check_int("workers", args.workers, high=16)
    if workers > 1:
        instead = (
            f"for {args.replicas} replicas on CPU use --workers {args.replicas}"
            if args.replicas
            else "on CPU each worker is one replica"
        )
        refuse_device_flags(args, f"--workers {workers}", instead)
    if workers > 1 and not args.multi_worker:
        return split_on_workers(args, workers)
    if args.multi_worker:
        task = cluster.current_task()
        request["workers"] = task.workers
        plan = split.plan(split_config(request, devices.worker_devices()), devices.make_multiworker_strategy())
        plan["worker"] = task.index
    else:
        spent = []
        plan = split.plan(split_config(request, device_names(args)), spent=spent)
        inputs.drop_later(spent)  # the answer need not wait for it (see split.plan)
    if args.json:
        print_json(plan)
        return 0
    print_plan(plan)
    return 0


def refuse_device_flags(args, workers_flag: str, instead: str) -> None:
    """--replicas and --devices pick the device set of one process; a worker of a cluster
    has its own, so they would be ignored: say so rather than run something else."""
    for flag, value in (("--replicas", args.replicas), ("--devices", args.devices)):
        if value is not None:
            raise DistcoreError(
                f"{flag} {value} does not apply with {workers_flag}: each worker process has its own devices "
                f"(MultiWorkerMirroredStrategy gives a CPU-only worker exactly one replica). Drop {flag}; {instead}."
            )


def print_plan(plan: dict, prefix: str = "") -> None:
    for number, step in enumerate(plan["steps"], start=1):
        print(f"{prefix}step {number}: " + "  ".join(f"r{r}={ids}" for r, ids in enumerate(step)))
        if plan.get("rows"):
            print(f"{prefix}  rows: " + "  ".join(f"r{r}={ids}" for r, ids in enumerate(plan["rows"][number - 1])))
    for note in plan["notes"] + plan["tf_messages"]:
        print(f"{prefix}- {note}")


def split_on_workers(args, workers: int) -> int:
    """The plan as W real worker processes of a MultiWorkerMirroredStrategy see it."""
    import tempfile
    from pathlib import Path

    from . import split

    split_config(
        {
            "examples": args.examples,
            "global_batch": args.global_batch,
            "api": args.api,
            "policy": args.policy,
            "files": args.files,
            "workers": workers,
            "shuffle_seed": args.shuffle_seed,
        },
        ("cpu:0",),
    )  # check first
    argv = [
        "split",
        "--multi-worker",
        "--json",
        "--examples",
        str(args.examples),
        "--global-batch",
        str(args.global_batch),
        "--policy",
        args.policy,
        "--api",
        args.api,
        "--files",
        str(args.files),
    ]
    argv += ["--drop-remainder"] if args.drop_remainder else []
    argv += ["--shuffle-seed", str(args.shuffle_seed)] if args.shuffle_seed is not None else []
    argv += ["--no-map"] if args.no_map else []
    with tempfile.TemporaryDirectory() as log_dir:
        outcome = cluster.launch(argv, workers, log_dir=Path(log_dir), timeout=300)
        outputs = [read_json_output(Path(log_dir) / f"worker-{i}.out") for i in range(workers)]
    if outcome.stop_requested:  # its workers' exits are the stop's, not failures ("worker 0 exited with status 130")
        raise stopping.interruption(outcome.stop_requested)
    errors = [o["error"] for o in outputs if o and "error" in o]
    if errors or outcome.failed is not None:
        raise DistcoreError(errors[0] if errors else outcome.message)
    result = {"workers": outputs, "notes": split.cluster_notes(outputs)}
    if args.json:
        print_json(result)
        return 0
    for index, plan in enumerate(outputs):
        print(f"worker {index}:")
        print_plan(plan, prefix="  ")
    for note in result["notes"]:
        print("- " + note)
    return 0


def read_json_output(path) -> dict | None:
    try:
        lines = [line for line in path.read_text().splitlines() if line.startswith("{")]
        return json.loads(lines[-1]) if lines else None
    except (OSError, ValueError):
        return None


def cmd_planner(args) -> int:
    """One process, devices configured once, many plans: the app's split visualiser."""
    from . import devices, inputs, split
    from .config import MAX_LOGICAL_CPUS

    devices.configure(MAX_LOGICAL_CPUS)
    print_json({"ready": True, "max_replicas": MAX_LOGICAL_CPUS})
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            if not isinstance(request, dict):
                raise DistcoreError("a planner request must be a JSON object.")
            if request.get("devices"):
                names = devices.resolve(devices=request["devices"])
            else:
                names = devices.resolve(replicas=request.get("replicas", 2))
            spent = []
            print_json(split.plan(split_config(request, names), spent=spent))
            inputs.drop_later(spent)  # after the answer, and off this thread: it can block (see split.plan)
        except DistcoreError as err:
            print_json({"error": str(err)})
        except ValueError as err:
            print_json({"error": f"malformed request: {err}"})
    return 0


TRAIN_FLAGS = (
    "global_batch",
    "epochs",
    "max_steps",
    "seed",
    "steps_per_loop",
    "checkpoint_every",
    "keep_checkpoints",
    "model",
    "optimizer",
    "learning_rate",
    "l2",
    "policy",
    "api",
    "drop_remainder",
    "train_examples",
    "test_examples",
    "data_dir",
    "task",
    "data",
)


def train_flags(args) -> dict:
    """The training flags given; the others keep their defaults (or a resumed run's values)."""
    return {k: getattr(args, k) for k in TRAIN_FLAGS if getattr(args, k) is not None}


def train_config(args, resumed: TrainConfig | None = None) -> TrainConfig:
    """The run's configuration: the flags given, or for a resume the already checked `resumed` one,
    with this process's devices (known only once TensorFlow is up; a resume may change them)."""
    given = train_flags(args) if resumed is None else {}
    if getattr(args, "multi_worker", False):
        given["workers"] = cluster.current_task().workers
        given["devices"] = devices.worker_devices()
    elif args.replicas is not None or args.devices is not None:
        given["devices"] = device_names(args)
    if resumed is not None:
        try:
            return resumed.replace(**given)
        except UnevenBatch as err:  # the devices are known only now
            raise runs.uneven_resume(err) from None
    given.setdefault("devices", device_names(args))
    return TrainConfig(**with_data_sizes(given))


def with_data_sizes(given: dict) -> dict:
    """Training and test examples default to all of the data's rows: an .npz file's are read."""
    from . import datasets

    data = given.get("data")
    if data and not {"train_examples", "test_examples"} <= set(given):
        name = check_data(data)
        if name not in datasets.BUILT_IN:
            rows = datasets.train_rows(name)
            given = {"train_examples": rows[0], "test_examples": rows[1], **given}
    return given


def cmd_train(args) -> int:
    from .stopping import StopFlag

    if args.engine == "ray" and not args.multi_worker:
        from . import rayengine

        return rayengine.train(args)
    for flag, value in (("--workers", args.workers), ("--ray-address", args.ray_address)):
        if value is not None:
            raise DistcoreError(f"{flag} applies only with --engine ray; for local worker processes use `cluster`.")
    if args.max_failures is not None:
        raise DistcoreError(
            "--max-failures applies only with --engine ray, whose workers Ray restarts after a failure; "
            "any other run that failed is continued with --resume."
        )

    # A resume is checked before this process claims the run, so a refusal leaves its status as it was.
    # It may change the number of worker processes (a cluster's run resumed by one process, or back).
    # Until the Controller connects, a worker's peers wait for it however it fails: say so.
    unconnected = cluster.peers_wait if args.multi_worker else (lambda err: err)
    try:
        if args.multi_worker:  # refused with a note on what a worker takes instead
            refuse_device_flags(
                args, "--multi-worker", "on GPUs, `cluster --replicas-per-worker R` gives each local worker R GPUs"
            )
        task = cluster.current_task() if args.multi_worker else cluster.Task(workers=1, index=0)
        changes = {**train_flags(args), "workers": task.workers}
        if args.multi_worker:  # not the saved run's devices times the workers; train_config checks this worker's own
            changes["devices"] = ("cpu:0",)
        elif args.resume and args.replicas is None and args.devices is None:
            changes["devices"] = runs.one_process_devices(runs.saved_config(args.run_dir))
        resumed = runs.resume_config(args.run_dir, changes) if args.resume else None
    except DistcoreError as err:
        raise unconnected(err) from None
    if args.resume and not args.multi_worker:  # (a cluster's launcher checked for its workers)
        jobs.check_not_training(args.run_dir)
    stop = StopFlag(args.run_dir, cluster=args.multi_worker).install()  # before TensorFlow loads
    if task.is_chief:  # the run directory is the chief's: another worker's pid there would let the app
        stop.announce(args.resume, resumed.total_steps() if resumed else None)  # stop the cluster too early
    try:
        config = train_config(args, resumed)  # (it loads TensorFlow: the stop flag is up by now)
    except DistcoreError as err:
        err = unconnected(err)
        stop.refused(str(err), args.resume)
        raise err from None
    try:
        from . import controller

        progress = None if args.json or not sys.stderr.isatty() else Progress(config.total_steps())
        on_record = keep_training(print_json if args.json else functools.partial(show_record, progress), stop)
        trainer = controller.Controller(config, args.run_dir, resume=args.resume, stop=stop, on_record=on_record)
    except DistcoreError as err:
        stop.failed(str(err))
        raise
    result = trainer.run()
    if progress:
        progress.close()
    if not args.json:
        print(f"{result['state']} at step {result['step']} of {result['total_steps']}; run directory: {args.run_dir}")
    return stop.exit_status() if result["state"] == "stopped" else 0


def cmd_cluster(args) -> int:
    """Start W workers here, each `train --multi-worker` with its own TF_CONFIG."""
    workers = check_int("workers", args.workers, low=2, high=16)
    per_worker = check_int("replicas per worker", args.replicas_per_worker, high=16)
    # Refused here, before any worker starts (and before the GPU count, which takes seconds):
    # a worker refusing alone would fail the run. For the batch checks the replica count matters.
    local = tuple(f"cpu:{i}" for i in range(per_worker))  # each worker's replicas (the count is what matters)
    if args.resume:  # with this cluster's devices, not the saved run's (4 devices x 2 workers is not it)
        config = runs.resume_config(args.run_dir, {**train_flags(args), "workers": workers, "devices": local})
        jobs.check_not_training(args.run_dir)
    else:
        runs.check_new(args.run_dir)
        config = TrainConfig(**train_flags(args), devices=local, workers=workers)
    stop = stopping.StopFlag(args.run_dir)  # its announce, withdraw and failed; the signals are handled here
    try:
        with stops_before_launch():
            # The run names this process, with its new total, from now on, as `train` announces
            # itself, so a resumed cluster does not show its old "finished" until a worker starts (~5 s).
            stop.announce(args.resume, config.total_steps())
            gpus = physical_gpus_without_tf()
            check_gpus(per_worker, workers, gpus)
            # Held from here until launch() has started the workers and passes requests on: a
            # request in between would kill this process and leave the run "starting" ("died").
            signal.pthread_sigmask(signal.SIG_BLOCK, stopping.STOPS)
    except StoppedBeforeLaunch as stopped:
        stop.stopped_before_training()  # a resume is put back, not "stopped 752/940" beside its config of 752
        print(f"{stopping.BEFORE_TRAINING}: nothing to save.", file=sys.stderr)
        return stopping.exit_status(stopped.signum)
    except DistcoreError as err:
        stop.refused(str(err), args.resume)  # as `train` does
        raise
    argv = ["train", "--multi-worker"] + forwarded_train_flags(args)
    launched = time.time()
    # Around launch, which passes stops on to the workers meanwhile: once they are gone there is
    # nothing to stop, and a SIGTERM right after the run finished must not kill the launcher (-15).
    # A handler that does nothing, not SIG_IGN, which would drop a stop held for the workers.
    with stopping.handling(stopping.STOPS, lambda signum, frame: None):
        outcome = cluster.launch(
            argv, workers, chief_stdout=sys.stdout if args.json else None, gpus_per_worker=per_worker if gpus else 0
        )
        return cluster_outcome(args, workers, outcome, launched)


def cluster_outcome(args, workers: int, outcome: cluster.Outcome, launched: float) -> int:
    """What the launcher says once its workers are gone, from their outcome and the run's files."""
    if not args.json:  # the chief's notes went to its log, as its stderr does
        for record in runs.read_metrics(args.run_dir):
            if record.get("time", 0) >= launched:
                show_record(None, record)
    if outcome.failed is not None:
        runs.record_failure(args.run_dir, outcome.message)
        saved = runs.list_checkpoints(args.run_dir)
        raise DistcoreError(
            outcome.message
            + (
                f" The run directory keeps its checkpoints (the newest: {saved[-1]}); continue with --resume."
                if saved
                else " No checkpoint was saved."
            )
        )
    state = (runs.read_status(args.run_dir) or {}).get("state", "finished")  # or stopped on request
    if not args.json:
        print(f"{workers} workers {state}; run directory: {args.run_dir}")
    if state != "stopped":
        return 0
    if outcome.stop_requested is None and reader_left(sys.stdout):
        # The chief wrote to this stdout (--json), lost its reader, and stopped the cluster as
        # a worker does, with status 0: the launcher says OUTPUT_LOST, not 0 as if finished.
        return OUTPUT_LOST
    return stopping.exit_status(outcome.stop_requested)


def reader_left(stream) -> bool:
    """Whether `stream` is a pipe whose reader has gone (poll reports an error on it)."""
    try:
        poller = select.poll()
        poller.register(stream.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # (a test's captured stream has no fd)
        return False


def check_gpus(per_worker: int, workers: int, gpus: int) -> None:
    if per_worker > 1 and gpus < workers * per_worker:
        raise DistcoreError(
            f"replicas per worker ({per_worker}) needs {workers * per_worker} GPUs; this machine has {gpus}. "
            "MultiWorkerMirroredStrategy gives each CPU-only worker exactly one replica."
        )


def forwarded_train_flags(args) -> list[str]:
    argv = []
    for key in ("run_dir",) + TRAIN_FLAGS:
        value = getattr(args, key, None)
        if value is True:
            argv.append("--" + key.replace("_", "-"))
        elif value not in (None, False):
            argv += ["--" + key.replace("_", "-"), str(value)]
    return argv + [flag for flag, on in (("--resume", args.resume), ("--json", args.json)) if on]


class StoppedBeforeLaunch(Exception):
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def stops_before_launch():
    """SIGTERM or Ctrl-C while `cluster` counts GPUs (seconds: the child imports TensorFlow)
    stops it as `train` stops before training begins, rather than ending it silently (exit
    143) with the child left running. Raised here, the exception also makes subprocess kill it."""

    def stop(signum, frame):
        raise StoppedBeforeLaunch(signum)

    with stopping.handling(stopping.STOPS, stop):
        yield


def physical_gpus_without_tf() -> int:
    """GPUs, counted in a child process: the launcher itself must not initialise TensorFlow."""
    import subprocess

    code = "import tensorflow as tf; print(len(tf.config.list_physical_devices('GPU')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    return int(out.stdout.strip() or 0)


def show_record(progress, record: dict) -> None:
    """A record as text: the progress bar's, and a note for what was read from elsewhere than
    asked (an older checkpoint, another data folder), which is otherwise only in the run's log."""
    if record.get("event") == "fallback":
        print(f"note: {record['message']}", file=sys.stderr)
    if progress:
        progress.update(record)
    elif is_epoch(record):  # without a terminal (a CI log) the epochs' results are shown here
        print(epoch_line(record), file=sys.stderr, flush=True)


def is_epoch(record: dict) -> bool:
    return runs.is_epoch_record(record)


def epoch_line(record: dict) -> str:
    """The epoch's train and test metrics (the classifier's: train loss, test accuracy)."""
    if "train_loss" in record and "test_accuracy" in record:
        return (
            f"epoch {record['epoch']}: train loss {record['train_loss']:.4f}, "
            f"test accuracy {record['test_accuracy']:.4f}"
        )
    shown = ", ".join(f"{k.replace('_', ' ')} {v:.4f}" for k, v in runs.record_scalars(record).items())
    return f"epoch {record['epoch']}: {shown}"


class Progress:
    """A one-line progress bar on a terminal's stderr."""

    def __init__(self, total: int):
        self.total = max(total, 1)

    def update(self, record: dict) -> None:
        if runs.is_step_record(record):
            done = record["step"] / self.total
            bar = "#" * int(30 * done)
            speed = record.get("examples_per_sec")  # none from the step that traced
            scalars = " ".join(f"{k} {v:.4f}" for k, v in runs.record_scalars(record).items())
            sys.stderr.write(
                f"\r[{bar:<30}] step {record['step']}/{self.total} {scalars} " + (f"{speed:.0f} ex/s " if speed else "")
            )
        elif is_epoch(record):
            sys.stderr.write(f"\n{epoch_line(record)}\n")
        sys.stderr.flush()

    def close(self) -> None:
        sys.stderr.write("\n")


def cmd_evaluate(args) -> int:
    from . import checkpoints, runs

    runs.read_config(args.run_dir)  # a clear error for a directory that is not a run
    names = None if args.no_strategy else device_names(args, default_replicas=1)
    result = checkpoints.evaluate(args.run_dir, args.checkpoint, names, details=args.details, data_dir=args.data_dir)
    if args.json:
        print_json(result)
        return 0
    shown = [k for k in ("accuracy", "loss") if k in result] + [k for k in result if k.endswith("_loss")]
    measured = ", ".join(f"{key.replace('_', ' ')} {result[key]:.4f}" for key in shown)
    print(
        f"{result['checkpoint']} (step {result['step']}) on {', '.join(result['devices'])}: "
        f"{measured} over {result['examples']} test images"
    )
    if "grid" in result:
        print(f"generated images: {result['grid']}")
    if "note" in result:
        print("note: " + result["note"])
    if args.details and "confusion" in result:
        print_details(result, runs.read_config(args.run_dir).get("data") or "fashion-mnist")
    return 0


def cmd_export(args) -> int:
    from . import checkpoints, runs

    runs.read_config(args.run_dir)  # a clear error for a directory that is not a run
    result = checkpoints.export(args.run_dir, args.out, args.checkpoint, args.format)
    if args.json:
        print_json(result)
    else:
        print(f"{result['checkpoint']} (step {result['step']}) written as {result['format']}: {result['path']}")
    return 0


def print_details(result: dict, data: str) -> None:
    """The confusion matrix (rows: true class, columns: predicted) and the sample predictions, the
    classes named as `data` (the run's config.data) names them: Fashion-MNIST's names, else numbers."""
    from .forms import class_names

    names = class_names(data, len(result["confusion"]))
    print(f"\nconfusion matrix (rows: true class, columns: predicted class 0-{len(names) - 1})")
    for index, row in enumerate(result["confusion"]):
        print(f"{index} {names[index]:>12} " + " ".join(f"{n:5d}" for n in row))
    print("\nsample predictions (test image: true -> predicted)")
    for sample in result["samples"]:
        mark = "ok" if sample["label"] == sample["predicted"] else "WRONG"
        print(f"#{sample['index']:<3} {names[sample['label']]} -> {names[sample['predicted']]}  {mark}")


def cmd_loss_check(args) -> int:
    from .losscheck import loss_check

    result = loss_check(
        device_names(args), args.global_batch, seed=args.seed, data_dir=args.data_dir, examples=args.examples
    )
    if args.json:
        print_json(result)
    else:  # the shares per replica ("2 + 2 + 0") too, not only in the JSON
        shares = " + ".join(str(n) for n in result["per_replica_examples"])
        print(f"{result['examples']} examples on {result['replicas']} replicas: {shares}")
        for key in (
            "single_device",
            "distributed",
            "tutorial_fixed_g",
            "keras_default",
            "mistake_reduce_mean",
            "mistake_keras_mean",
        ):
            value = result[key]
            print(f"{key:>20}: " + (f"{value:.6f}" if value is not None else f"fails ({result[key + '_failure']})"))
        print(result["explanation"])
    return 0


def cmd_bench(args) -> int:
    from . import bench  # its workers import TensorFlow, each in a process of its own

    return bench.main(args)


def run_command(name: str, args) -> int:
    """`sweep` and `runs` (distcore.runcommands, loaded for them alone)."""
    from . import runcommands

    return getattr(runcommands, name)(args)


COMMANDS = {
    "devices": cmd_devices,
    "split": cmd_split,
    "planner": cmd_planner,
    "train": cmd_train,
    "cluster": cmd_cluster,
    "evaluate": cmd_evaluate,
    "export": cmd_export,
    "loss-check": cmd_loss_check,
    "bench": cmd_bench,
    "sweep": lambda args: run_command("cmd_sweep", args),
    "runs": lambda args: run_command("cmd_runs", args),
}


def parse(argv: list[str]) -> argparse.Namespace:
    """The command's own parser reports a flag it does not take, with its own usage
    (`cluster --replicas 2` gets cluster's usage, not the top level's `COMMAND ...`)."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        parser.commands[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


def main(argv=None, *, leave_at_once: bool = False) -> int:
    """Run one command and return its exit status.

    With `leave_at_once` (`python -m distcore`), a command that returns leaves the
    process at once: everything it writes is on disk by then, and TensorFlow's teardown
    of used iterators can take up to a minute (see inputs.drop_later), during which the
    app would still count the run as active. Multi-worker processes that did not fail exit
    normally, so TensorFlow's coordination service sees them leave.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    with contextlib.suppress(AttributeError, ValueError):  # (a test's captured stream)
        # A path the output's encoding cannot spell (PYTHONIOENCODING=ascii) must not fail a
        # finished run at its last line (exit 1); stderr escapes such characters already.
        sys.stdout.reconfigure(errors="backslashreplace")
    try:
        args = parse(argv)
    except UsageError as err:
        if "--json" in argv:
            print_json({"error": str(err)})
        sys.stderr.write(err.usage)
        return 2
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1" if args.command in WARNINGS_SHOWN else "2")
    try:
        if args.command != "train" or getattr(args, "engine", None) == "ray":  # a launcher's workers start with
            # stops held (`train`: StopFlag.install); the Ray driver handles them itself
            signal.pthread_sigmask(signal.SIG_UNBLOCK, stopping.STOPS)  # (a held Ctrl-C lands in this try)
        devices.check_thread_variables()
        code = COMMANDS[args.command](args)
    except DistcoreError as err:
        if getattr(args, "json", False):
            print_json({"error": str(err)})
        print(f"error: {err}", file=sys.stderr)
        code = 2
    except stopping.StopSignal as err:  # SIGTERM, SIGHUP
        print(f"stopped ({err}).", file=sys.stderr)
        code = 128 + err.signum
    except KeyboardInterrupt:  # Ctrl-C where a command has no handling of its own (e.g. cluster's GPU count)
        print("stopped (Ctrl-C).", file=sys.stderr)
        code = 130
    except OSError as err:
        if not output_lost(err):
            raise
        code = OUTPUT_LOST  # (a reader that left, as `| head -3` does: no traceback)
    if leave_at_once:  # the process ends now: nothing is left to stop. A stop that comes while a
        for sig in stopping.STOPS:  # cluster worker leaves the usual way (seconds) would kill it, and
            signal.signal(sig, signal.SIG_IGN)  # the launcher would mark the finished run failed
    # A worker of a cluster leaves the usual way, so TensorFlow's coordination service sees it
    # go, unless it failed: with a peer gone, that way takes another 2.3-10.9 s after the
    # failure is written (measured in 3 runs).
    if leave_at_once and (code != 0 or not getattr(args, "multi_worker", False)):
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError):  # (a reader that left)
                stream.flush()
        stopping.remove_autograph_files()  # autograph removes them at exit, which os._exit skips
        os._exit(code)
    return code


def console() -> None:
    """The `distcore` console command (pyproject.toml) and `python -m distcore`: one command, then exit."""
    sys.exit(main(leave_at_once=True))
