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
actor (the coordinator) that every worker polls; each worker sends the signal to its child, which
stops at the end of its loop of steps with a checkpoint, as under the local launcher.

A failed worker (its child killed, its Ray worker or node lost) fails the worker group, and Ray
starts a new one (`FailureConfig(max_failures=...)`, `--max-failures`). A group starts its children
with `--resume` once the run folder holds a `metrics.jsonl` (written when the workers first
connected), so they restore the newest intact checkpoint and roll the metrics after it back, as
`--resume` does: the steps since that checkpoint are trained again, and each is logged once. The
coordinator keeps what no restart may undo: a stop request (a group started after one starts no
child) and a worker's own error, a DistcoreError that another group would meet again (the other
workers end their children, and no group starts after it).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
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

from . import cluster, devices, runs, stopping
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
MAX_FAILURES = 3  # --max-failures: the worker group restarts a run may take
# A worker's error caused by the loss of another process (Controller.cluster_failure) or by a port
# taken meanwhile (devices.server_failure): a new worker group, on new ports, gets past it. Any other
# error a child reports with status 2 is a DistcoreError of the run's own, which every group meets.
TRANSIENT_ERRORS = ("the cluster lost a peer", "cannot start this worker's server")
# How long a restarted chief waits for the previous group's chief to let go of the run's lock.
PREVIOUS_CHIEF_SECONDS = 15.0


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


def make_coordinator(ray, name: str):
    @ray.remote(num_cpus=0)
    class Coordinator:
        """What the driver and every worker group of the run share."""

        def __init__(self):
            self.signum = None  # the driver's stop request
            self.final = None  # a worker's own error: the run ends, no group starts after it
            self.failures = []  # (group, message) of each failed child, oldest first
            self.groups = []  # each worker group's cluster (its TF_CONFIG's), in the order they started

        def stop(self, signum: int) -> None:
            self.signum = self.signum or signum

        def begin(self, group: str) -> dict:
            """A worker of `group` starts: the state, with the group's number (1: the first)."""
            if group not in self.groups:
                self.groups.append(group)
            return {**self.state(), "group": self.groups.index(group) + 1}

        def failed(self, group: int, message: str, final: bool) -> None:
            self.failures.append((group, message))
            if final:
                self.final = self.final or message

        def state(self) -> dict:
            return {"signum": self.signum, "final": self.final, "groups": len(self.groups), "failures": self.failures}

    return Coordinator.options(name=name).remote()


def fit(
    ray,
    argv: list[str],
    workers: int,
    run_dir: Path,
    asked: list[int],
    nodes: int,
    max_failures: int,
    say,
    follow=lambda: None,
) -> str | None:
    """Run the W workers to their end, through up to `max_failures` restarts of the worker group;
    the failure's message, or None. A stop request (a signal number put in `asked`) is passed on to
    the workers; `say` is told of each restart; `follow` is called every 0.2 s while they run."""
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.tensorflow import TensorflowTrainer

    name = f"distcore-coordinator-{uuid.uuid4().hex[:12]}"
    coordinator = make_coordinator(ray, name)
    storage = Path(tempfile.mkdtemp(prefix="distcore-ray-")) if nodes <= 1 else run_dir.parent / ".distcore-ray"
    config = {
        "argv": argv,
        "run_dir": str(run_dir),
        "coordinator": name,
        "driver_env": {key: os.environ.get(key) for key in DRIVER_VALUES},
        "cwd": os.getcwd(),
    }
    trainer = TensorflowTrainer(
        worker_loop,
        train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=workers, resources_per_worker={"CPU": 1}),
        run_config=RunConfig(
            name=f"{run_dir.name}-{int(time.time())}",
            storage_path=str(storage),
            failure_config=FailureConfig(max_failures=max_failures),
        ),
    )
    done = threading.Event()

    def watch():  # a signal handler only records: the stop reaches the coordinator from here, and restarts are told
        told, groups, polls = False, 1, 0
        while not done.wait(0.2):
            if asked and not told:
                coordinator.stop.remote(asked[0])
                told = True
            polls += 1
            if polls % 5:
                continue
            with contextlib.suppress(Exception):  # (Ray going down with the driver)
                state = ray.get(coordinator.state.remote(), timeout=5)
                if state["groups"] > groups and not state["final"] and not asked:
                    groups = state["groups"]
                    say(
                        f"Ray restarted the workers (restart {groups - 1} of at most {max_failures}) after: "
                        f"{cause(state, groups - 1)}; they resume from the newest checkpoint."
                    )

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    failed: list[Exception] = []

    def run_fit():
        try:
            trainer.fit()
        except Exception as err:  # Ray's TrainingFailedError: a worker failed, and the restarts are spent
            failed.append(err)

    # fit() runs off the main thread: on the main thread Ray Train puts in its own SIGINT handler,
    # which aborts the workers with no checkpoint, and Ctrl-C must stop them as SIGTERM does.
    # The main thread waits in short joins, so the signal handlers run at once.
    runner = threading.Thread(target=run_fit, name="distcore-ray-fit", daemon=True)
    try:
        runner.start()
        while runner.is_alive():
            runner.join(0.2)
            follow()
    finally:
        error = failed[0] if failed else None
        done.set()
        watcher.join()
        state = {}
        with contextlib.suppress(Exception):
            state = ray.get(coordinator.state.remote(), timeout=10)
        with contextlib.suppress(Exception):
            ray.kill(coordinator)
        if nodes <= 1:
            shutil.rmtree(storage, ignore_errors=True)
    return outcome_message(error, state, max_failures, asked, run_dir)


def outcome_message(error, state: dict, max_failures: int, asked: list[int], run_dir: Path) -> str | None:
    """What failed, or None: a worker's own error first (it ended the run at once), then Ray's
    error once the restarts were spent, then a failure whose restart a stop request cancelled."""
    if state.get("final"):
        return state["final"]
    restarts = max(state.get("groups", 1) - 1, 0)
    if error is not None:
        spent = f" after {restarts} restart(s) of the workers (--max-failures {max_failures})" if restarts else ""
        return f"the Ray run failed{spent}: {first_line(error)}"
    ended = (runs.read_status(run_dir) or {}).get("state") in ("finished", "stopped")
    if asked and not ended and state.get("failures"):
        return (
            f"a worker failed ({cause(state, state['failures'][-1][0])}) and the stop request came before "
            "Ray's restart resumed the run, so nothing more was saved."
        )
    return None


def cause(state: dict, group: int) -> str:
    """Why worker group `group` failed: the first failure its workers reported (the others' are
    what it caused, a lost peer), or a worker Ray lost, which reports nothing."""
    told = [message for number, message in state.get("failures", []) if number == group]
    return told[0] if told else "Ray lost a worker (its process or node)"


def first_line(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    told = [line for line in lines if line.startswith("distcore worker")]
    return (told or lines or [type(err).__name__])[0][:600]


def last_error(log: Path) -> str:
    """The last `error: ...` line a child wrote (the CLI's one line for a DistcoreError)."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return next((line for line in reversed(lines) if line.startswith("error: ")), "")


def own_error(returncode: int, log: Path) -> bool:
    """Whether a child's failure is the run's own error, which a new worker group would meet again:
    status 2 (a DistcoreError) for a reason other than a lost peer or a taken port. A child killed by a
    signal, or one that crashed (status 1), is worth a restart."""
    return returncode == 2 and not any(sign in last_error(log) for sign in TRANSIENT_ERRORS)


def die_with_parent() -> None:
    """In the child, before exec: SIGKILL when the thread that started it ends (its Ray worker gone)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def wait_for_previous_chief(run_dir: Path) -> None:
    """In a restarted group's chief: until the previous group's chief (SIGKILLed with its Ray worker,
    an instant ago) has let go of the run's lock, so the new one is not refused as a second trainer."""
    deadline = time.monotonic() + PREVIOUS_CHIEF_SECONDS
    while runs.lock_holder(run_dir) is not None and time.monotonic() < deadline:
        time.sleep(0.1)


def worker_loop(config: dict) -> None:
    """One Ray Train worker: `python -m distcore train --multi-worker ...` with Ray's TF_CONFIG."""
    import ray
    import ray.train

    context = ray.train.get_context()
    rank = context.get_world_rank()
    coordinator = ray.get_actor(config["coordinator"])
    # The workers of one group share the cluster Ray wrote in their TF_CONFIG; a new group has new ports.
    group = json.dumps(json.loads(os.environ.get("TF_CONFIG") or "{}").get("cluster"), sort_keys=True)
    state = ray.get(coordinator.begin.remote(group))
    # A restart after the run's own error, or after a stop request, starts nothing. The first group
    # starts its children whatever came before, and passes a stop request on to them (below).
    if state["final"] or (state["signum"] and state["group"] > 1):
        return
    cwd = config["cwd"] if os.path.isdir(config["cwd"]) else None
    run_dir = Path(cwd or os.getcwd(), config["run_dir"])
    if state["group"] > 1 and (runs.read_status(run_dir) or {}).get("state") == "finished":
        return  # the run finished before a worker was lost: nothing is left to train
    argv = list(config["argv"])
    if "--resume" not in argv and (run_dir / "metrics.jsonl").exists():  # a restart: the workers met before
        argv.append("--resume")
    if rank == 0 and state["group"] > 1:
        wait_for_previous_chief(run_dir)
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
    # Held until the child's stop handler is in place (as cluster.held_stops): the mask of this
    # thread passes through fork and exec.
    signal.pthread_sigmask(signal.SIG_BLOCK, stopping.STOPS)
    try:
        with open(logs / "stdout", "w") as out, open(logs / "stderr", "w") as err:
            child = subprocess.Popen(
                [sys.executable, "-m", "distcore", *argv],
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
            if child.returncode is not None:
                break
            now = ray.get(coordinator.state.remote())
            if now["final"]:  # another worker's own error ended the run: no restart, no stop to wait for
                child.kill()
                child.wait()
                return
            if now["signum"] and not passed_on:
                child.send_signal(now["signum"])
                passed_on = True
        if child.returncode != 0:
            message = (
                f"distcore worker {rank} {cluster.describe_exit(child.returncode)}; its log ends: "
                f"{cluster.tail(logs / 'stderr')}"
            )
            final = own_error(child.returncode, logs / "stderr")
            ray.get(coordinator.failed.remote(state["group"], message, final))
            # Ended here, not by Ray's failure handling, which would start another group: this worker's
            # own error, or a lost peer whose own error ended the run.
            if final or ray.get(coordinator.state.remote())["final"]:
                return
            raise RuntimeError(message)
        shutil.rmtree(logs, ignore_errors=True)  # kept after a failure, for the post-mortem
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def train(args) -> int:
    """`distcore train --engine ray --workers W [--ray-address ADDR] [--max-failures N] --run-dir D ...`."""
    from . import cli, jobs
    from .config import TrainConfig, check_int

    workers = check_int("workers", args.workers, low=2, high=256)
    max_failures = MAX_FAILURES if args.max_failures is None else check_int("max failures", args.max_failures, low=0)
    cli.refuse_device_flags(args, "--engine ray", "on CPU each Ray worker is one replica")
    if not args.ray_address:  # read as Ray is imported: the local instance advertises and binds 127.0.0.1 only
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
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

    def say(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    with stopping.handling(stopping.STOPS, record):
        try:
            started = time.monotonic()
            start(ray, args.ray_address, workers)
            ray_seconds = time.monotonic() - started
            for sig in stopping.STOPS:  # ray.init puts its own SIGTERM handler in (it ends the driver at once)
                signal.signal(sig, record)
            # Announced once the handlers are back: the app signals a run once its status names the process.
            stop.announce(args.resume, config.total_steps())
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
            records = runs.RecordTail(args.run_dir, since=launched)

            def follow():  # the chief's records, from the run folder (its stdout stays on its node)
                for record in records.new() if args.json else ():
                    cli.print_json(record)

            failure = fit(ray, argv, workers, Path(args.run_dir), asked, nodes, max_failures, say, follow)
            follow()
        finally:
            with contextlib.suppress(Exception):
                ray.shutdown()
    outcome = cluster.Outcome([], None if failure is None else 0, failure or "", None, asked[0] if asked else None)
    return cli.cluster_outcome(args, workers, outcome, launched)
