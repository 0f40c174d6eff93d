"""`train --engine ray`: the run's workers placed by Ray Train.

`ray.train.tensorflow.TensorflowTrainer` starts W Ray Train workers and writes each one's
`TF_CONFIG`; each worker runs `python -m distcore train --multi-worker ...` as a child process,
the same worker the local launcher (`cluster`) starts, so the Controller, the run folder, the
metrics, the checkpoints and the stop handling are those of every other multi-worker run. Ray
only places and starts the workers: TensorFlow's collectives do the training.

A worker runs as a child process, not in Ray's training thread, because TensorFlow sets its devices
up once per process and a stop handler can only be installed in a process's main thread. The child
dies with its Ray worker (PR_SET_PDEATHSIG), so a worker group Ray tears down leaves no trainer behind.

The driver (this process) takes SIGTERM, SIGINT and SIGHUP and passes them on through a named Ray
actor that every worker polls; each worker sends the signal to its child, which stops at the end of
its loop of steps with a checkpoint, as under the local launcher.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from . import cluster, devices, stopping
from .config import DistcoreError

INSTALL = (
    "--engine ray needs Ray, which is not installed: pip install 'distcore[ray]' "
    "(or pip install -r requirements-ray.txt)."
)
# Filesystem types (/proc/mounts) that several hosts can mount: a run folder on any other type is
# local to the host that wrote it, and a cluster of more than one node cannot share it.
SHARED_FILESYSTEMS = ("nfs", "nfs4", "cifs", "smb3", "smbfs", "ceph", "glusterfs", "lustre", "gpfs", "beegfs", "9p")
POLL_SECONDS = 0.5
PR_SET_PDEATHSIG = 1
# Variables Ray sets in its workers that would change how the trainer runs: the child gets the
# driver's values (TF_USE_LEGACY_KERAS=1 would load tf_keras, OMP_NUM_THREADS=1 would narrow ops).
DRIVER_VALUES = ("TF_USE_LEGACY_KERAS", "OMP_NUM_THREADS")


def import_ray():
    """Ray and its TensorFlow trainer, or a DistcoreError saying how to install them."""
    try:
        import ray
        import ray.train  # noqa: F401
        import ray.train.tensorflow  # noqa: F401
    except ImportError:
        raise DistcoreError(INSTALL) from None
    return ray


def filesystem_type(path: Path) -> str:
    """The type of the filesystem holding `path` (its nearest existing folder), from /proc/mounts."""
    path = Path(path).resolve()
    while not path.exists() and path != path.parent:
        path = path.parent
    best, kind = "", "unknown"
    try:
        lines = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return kind
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        mount = fields[1].replace("\\040", " ")
        inside = str(path) == mount or str(path).startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best):
            best, kind = mount, fields[2]
    return kind


def is_shared(kind: str) -> bool:
    return kind in SHARED_FILESYSTEMS or kind.startswith("fuse")


def check_storage(run_dir: Path, nodes: int) -> None:
    """Refuse a run folder on a local disk when the cluster has more than one node: workers on
    other nodes would not find the checkpoints, and a resume on another node would lose the run."""
    if nodes <= 1:
        return
    kind = filesystem_type(run_dir)
    if not is_shared(kind):
        raise DistcoreError(
            f"the Ray cluster has {nodes} nodes but --run-dir {run_dir} is on a local filesystem ({kind}): "
            "put the run folder on storage every node mounts at the same path (NFS, CephFS, Lustre, a FUSE "
            "mount of an object store; see docs/clusters.md), or use a single-node Ray instance."
        )


def start(ray, address: str | None, workers: int) -> None:
    """Join the cluster at `address`, or start a local Ray instance bound to 127.0.0.1 only."""
    quiet = {"include_dashboard": False, "log_to_driver": False, "logging_level": "WARNING"}
    if address:
        ray.init(address=address, **quiet)
        return
    # One CPU per worker: as many as asked even on fewer cores, as the local launcher does.
    ray.init(_node_ip_address="127.0.0.1", num_cpus=max(workers, devices.cpu_cores()), **quiet)


def alive_nodes(ray) -> int:
    return sum(1 for node in ray.nodes() if node.get("Alive"))


def make_stopper(ray, name: str):
    @ray.remote(num_cpus=0)
    class Stopper:
        """The driver's stop request (a signal number), read by every worker."""

        def __init__(self):
            self.signum = None

        def set(self, signum: int) -> None:
            self.signum = self.signum or signum

        def get(self):
            return self.signum

    return Stopper.options(name=name).remote()


def fit(ray, argv: list[str], workers: int, run_dir: Path, asked: list[int], nodes: int) -> str | None:
    """Run the W workers to their end; the failure's message, or None. A stop request (a signal
    number put in `asked`) is passed on to the workers."""
    from ray.train import RunConfig, ScalingConfig
    from ray.train.tensorflow import TensorflowTrainer

    name = f"distcore-stop-{uuid.uuid4().hex[:12]}"
    stopper = make_stopper(ray, name)
    storage = Path(tempfile.mkdtemp(prefix="distcore-ray-")) if nodes <= 1 else run_dir.parent / ".distcore-ray"
    config = {
        "argv": argv,
        "stopper": name,
        "driver_env": {key: os.environ.get(key) for key in DRIVER_VALUES},
        "cwd": os.getcwd(),
    }
    trainer = TensorflowTrainer(
        worker_loop,
        train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=workers, resources_per_worker={"CPU": 1}),
        run_config=RunConfig(name=f"{run_dir.name}-{int(time.time())}", storage_path=str(storage)),
    )
    done = threading.Event()

    def forward():  # a signal handler only records; the actor is told from here
        told = False
        while not done.wait(0.2):
            if asked and not told:
                stopper.set.remote(asked[0])
                told = True

    forwarder = threading.Thread(target=forward, daemon=True)
    forwarder.start()
    try:
        trainer.fit()
        return None
    except Exception as err:  # Ray's TrainingFailedError: a worker's child failed, or Ray lost a worker
        return f"the Ray run failed: {first_line(err)}"
    finally:
        done.set()
        forwarder.join()
        with contextlib.suppress(Exception):
            ray.kill(stopper)
        if nodes <= 1:
            shutil.rmtree(storage, ignore_errors=True)


def first_line(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    told = [line for line in lines if line.startswith("distcore worker")]
    return (told or lines or [type(err).__name__])[0][:600]


def die_with_parent() -> None:
    """In the child, before exec: SIGKILL when the thread that started it ends (its Ray worker gone)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def worker_loop(config: dict) -> None:
    """One Ray Train worker: `python -m distcore train --multi-worker ...` with Ray's TF_CONFIG."""
    import ray
    import ray.train

    context = ray.train.get_context()
    rank = context.get_world_rank()
    env = dict(os.environ)  # with the TF_CONFIG Ray wrote for this worker
    for key, value in config["driver_env"].items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    env[stopping.LAUNCHED_ENV] = "1"  # Ray ends the group when a worker fails
    if not env.get("CUDA_VISIBLE_DEVICES"):  # the node's workers share its cores, as the launcher's do
        env.setdefault("TF_NUM_INTRAOP_THREADS", str(devices.intra_op_threads(context.get_local_world_size())))
    logs = Path(tempfile.mkdtemp(prefix=f"distcore-ray-worker-{rank}-"))
    cwd = config["cwd"] if os.path.isdir(config["cwd"]) else None
    stopper = ray.get_actor(config["stopper"])
    # Held until the child's stop handler is in place (as cluster.held_stops): the mask of this
    # thread passes through fork and exec.
    signal.pthread_sigmask(signal.SIG_BLOCK, stopping.STOPS)
    try:
        with open(logs / "stdout", "w") as out, open(logs / "stderr", "w") as err:
            child = subprocess.Popen(
                [sys.executable, "-m", "distcore", *config["argv"]],
                env=env,
                cwd=cwd,
                stdout=out,
                stderr=err,
                preexec_fn=die_with_parent,
            )
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stopping.STOPS)
    try:
        passed_on = False
        while child.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(POLL_SECONDS)
            if child.returncode is None and not passed_on:
                signum = ray.get(stopper.get.remote())
                if signum:
                    child.send_signal(signum)
                    passed_on = True
        if child.returncode != 0:
            raise RuntimeError(
                f"distcore worker {rank} {cluster.describe_exit(child.returncode)}; its log ends: "
                f"{cluster.tail(logs / 'stderr')}"
            )
        shutil.rmtree(logs, ignore_errors=True)  # kept after a failure, for the post-mortem
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def train(args) -> int:
    """`distcore train --engine ray --workers W [--ray-address ADDR] --run-dir D ...`."""
    from . import cli, jobs, runs
    from .config import TrainConfig, check_int

    workers = check_int("workers", args.workers, low=2, high=256)
    cli.refuse_device_flags(args, "--engine ray", "on CPU each Ray worker is one replica")
    ray = import_ray()  # before the run folder is touched
    if args.resume:
        config = runs.resume_config(args.run_dir, {**cli.train_flags(args), "workers": workers, "devices": ("cpu:0",)})
        jobs.check_not_training(args.run_dir)
    else:
        runs.check_new(args.run_dir)
        config = TrainConfig(**cli.train_flags(args), devices=("cpu:0",), workers=workers)
    stop = stopping.StopFlag(args.run_dir)  # announce and the status; the signals are handled here
    asked: list[int] = []

    def record(signum, _frame):
        asked.append(signum)

    with stopping.handling(stopping.STOPS, record):
        stop.announce(args.resume, config.total_steps())
        try:
            started = time.monotonic()
            start(ray, args.ray_address, workers)
            ray_seconds = time.monotonic() - started
            for sig in stopping.STOPS:  # ray.init puts its own SIGTERM handler in (it ends the driver at once)
                signal.signal(sig, record)
            try:
                nodes = alive_nodes(ray)
                check_storage(Path(args.run_dir), nodes)
            except DistcoreError as err:
                stop.refused(str(err), args.resume)
                raise
            if asked:
                stop.stopped_before_training()
                print(f"{stopping.BEFORE_TRAINING}: nothing to save.", file=sys.stderr)
                return stopping.exit_status(asked[0])
            if not args.json:
                print(
                    f"Ray started in {ray_seconds:.1f} s ({nodes} node(s)); starting {workers} workers", file=sys.stderr
                )
            argv = ["train", "--multi-worker"] + cli.forwarded_train_flags(args)
            launched = time.time()
            failure = fit(ray, argv, workers, Path(args.run_dir), asked, nodes)
        finally:
            with contextlib.suppress(Exception):
                ray.shutdown()
    if args.json:  # the chief's records, from the run folder (its stdout stays on its node)
        for record in runs.read_metrics(args.run_dir):
            if record.get("time", 0) >= launched:
                cli.print_json(record)
    outcome = cluster.Outcome([], None if failure is None else 0, failure or "", None, asked[0] if asked else None)
    return cli.cluster_outcome(args, workers, outcome, launched)
