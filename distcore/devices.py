"""Devices: what exists, how a user names a device set, and setting up the process.

TensorFlow fixes a process's logical devices when it first initialises them,
so `configure()` must run before anything else touches devices, and only once
per process. That is why the app runs each job in a process of its own.

Device names are written `cpu:0`, `gpu:1` (case-insensitive). A set is given as a
count (`replicas=4`: the GPUs when there are enough, else logical CPUs) or as an
explicit list.
"""

from __future__ import annotations

import os
import signal

from . import settings
from .config import MAX_LOGICAL_CPUS, DistcoreError, check_int, device_set, parse_device_list  # noqa: F401


def physical_gpu_count() -> int:
    import tensorflow as tf

    return len(tf.config.list_physical_devices("GPU"))


def resolve(replicas=None, devices=None, gpus: int | None = None) -> tuple[str, ...]:
    """Turn a count or a list into device names, checked against what the machine has."""
    gpus = physical_gpu_count() if gpus is None else gpus
    if devices is not None and replicas is not None:
        raise DistcoreError("give either a replica count or a device list, not both.")
    if devices is not None:
        return device_set(devices, gpus)
    count = check_int("replicas", 2 if replicas is None else replicas, high=max(MAX_LOGICAL_CPUS, gpus))
    if gpus >= count:
        return tuple(f"gpu:{i}" for i in range(count))
    if count > MAX_LOGICAL_CPUS:
        raise DistcoreError(f"replicas ({count}) must be at most {MAX_LOGICAL_CPUS} on this machine.")
    return tuple(f"cpu:{i}" for i in range(count))


def cpu_cores() -> int:
    """Cores this process may run on (its affinity mask, not the host's total)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def intra_op_threads(replicas: int, cores: int | None = None) -> int:
    """Threads each op may use when `replicas` CPU replicas share the cores.

    TensorFlow's default gives every op all the cores, and the replicas' ops run
    side by side on top of that: 2 replicas on 2 cores ask for 4 busy threads.
    One core share per replica measured 5% faster at 2 replicas and 11% at 4 on
    a 2-core machine (medians of 9 runs each; docs/performance.md).
    """
    cores = cpu_cores() if cores is None else cores
    return max(1, cores // max(1, replicas))


THREAD_VARIABLES = ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")


def check_thread_variables() -> None:
    """TensorFlow's thread counts from the environment, checked before TensorFlow reads them:
    -1 would abort the process with a C++ stack trace, and "abc" would be taken in silence."""
    for name in THREAD_VARIABLES:
        value = (settings.get(name) or "").strip()
        if value and not value.isdigit():
            raise DistcoreError(
                f"{name}={os.environ[name]!r} is not a number of threads: give a whole number "
                "(0: TensorFlow's default), or unset it."
            )


def intra_op_setting() -> int:
    """Threads per op in this process: what `configure` set, else TF_NUM_INTRAOP_THREADS,
    else 0 (TensorFlow's default: all cores)."""
    import tensorflow as tf

    configured = tf.config.threading.get_intra_op_parallelism_threads()
    env = (settings.get("TF_NUM_INTRAOP_THREADS") or "").strip()
    return configured or (int(env) if env.isdigit() else 0)


def configure(logical_cpus: int, replicas: int | None = None) -> None:
    """Split the CPU into `logical_cpus` logical devices; must run before TF uses devices.

    With `replicas` (CPU replicas that will train side by side), also give each op
    its share of the cores, unless TF_NUM_INTRAOP_THREADS or the caller's own
    tf.config.threading setting already says how many (a library user's is kept).
    """
    import tensorflow as tf

    # configure("4"), configure(0) and configure(17) are refused with a message, not a TypeError or taken
    logical_cpus = check_int("logical CPU devices", logical_cpus, high=MAX_LOGICAL_CPUS)
    replicas = check_int("replicas", replicas, low=0, high=MAX_LOGICAL_CPUS) if replicas is not None else None
    if (
        replicas
        and "TF_NUM_INTRAOP_THREADS" not in os.environ
        and not tf.config.threading.get_intra_op_parallelism_threads()
    ):
        try:
            tf.config.threading.set_intra_op_parallelism_threads(intra_op_threads(replicas))
        except RuntimeError:
            pass  # TensorFlow is already running in this process: its threads stay as they are
    cpus = tf.config.list_physical_devices("CPU")
    try:
        current = tf.config.get_logical_device_configuration(cpus[0]) or []
        if len(current) >= logical_cpus:
            return
        tf.config.set_logical_device_configuration(
            cpus[0], [tf.config.LogicalDeviceConfiguration() for _ in range(logical_cpus)]
        )
    except RuntimeError:
        have = len(tf.config.list_logical_devices("CPU"))
        if have < logical_cpus:
            raise DistcoreError(
                f"this process already initialised {have} CPU device(s) and cannot split into "
                f"{logical_cpus}; run the job in a new process (in a notebook: restart the kernel, then call "
                f"distcore.devices.configure(N) first, N the most logical CPUs any cell will use)."
            ) from None


def threads_differ(names) -> str | None:
    """Why a training on device set `names`, prepared in this process, may not match the same run
    from the CLI or the app (a process each), or None. TensorFlow takes the thread count once per
    process: a notebook's later run on another replica count keeps the first one's."""
    replicas = sum(name.startswith("cpu") for name in device_set(names))
    have = intra_op_setting()
    if not replicas or "TF_NUM_INTRAOP_THREADS" in os.environ or have == intra_op_threads(replicas):
        return None
    threads = f"{have} thread(s)" if have else "TensorFlow's default thread count (all the cores)"
    return (
        f"this process runs each TensorFlow op on {threads}, as set when TensorFlow "
        f"first ran here (by an earlier run or evaluation, or by you); a new process for {replicas} replica(s) "
        f"uses {intra_op_threads(replicas)} (a core share per replica). The losses then match the same run "
        "from the CLI or the app only to about 5 digits. For equal ones, train each device set in a new "
        "process (a new notebook kernel), or set TF_NUM_INTRAOP_THREADS for all."
    )


def prepare(names) -> list[str]:
    """Configure the process for the device set `names` (any form `device_set` reads:
    "cpu:0,cpu:1", ("CPU:0",)) and return TF device strings for a strategy."""
    names = device_set(names)  # (TensorFlow's own checks: an IndexError, "No duplicates allowed")
    if any(name.startswith("gpu") for name in names):
        device_set(names, physical_gpu_count())  # else TensorFlow would quietly place them on the CPU
    cpu_indices = [int(n.split(":")[1]) for n in names if n.startswith("cpu")]
    configure(max(cpu_indices, default=0) + 1, replicas=len(cpu_indices))
    return [f"/{n.split(':')[0].upper()}:{n.split(':')[1]}" for n in names]


def make_strategy(names):
    """A MirroredStrategy over `names`; callers that report the names use `resolve(devices=...)`
    for them, as this reads them."""
    import tensorflow as tf

    tf_devices = prepare(names)
    if tf_devices[0].startswith("/GPU"):
        return tf.distribute.MirroredStrategy(devices=tf_devices)  # NCCL all-reduce
    # On CPU devices TF's default is RING collectives, whose group keys restart at 1
    # for every strategy object: two strategies of different sizes in one process
    # (tests, the planner, evaluation after training) then abort each other's
    # all-reduce. Reducing to one device is plain adds in one host's memory.
    return tf.distribute.MirroredStrategy(
        devices=tf_devices, cross_device_ops=tf.distribute.ReductionToOneDevice(reduce_to_device=tf_devices[0])
    )


def inventory() -> dict:
    """What `python -m distcore devices` reports."""
    import tensorflow as tf

    gpus = physical_gpu_count()
    return {
        "tensorflow": tf.__version__,
        "gpus": [f"gpu:{i}" for i in range(gpus)],
        "cpus": len(tf.config.list_physical_devices("CPU")),
        "cpu_cores": cpu_cores(),
        "max_logical_cpus": MAX_LOGICAL_CPUS,
        "default": list(resolve(replicas=max(2, gpus), gpus=gpus)),
    }


def make_multiworker_strategy():
    """MultiWorkerMirroredStrategy from TF_CONFIG: one replica per local GPU, or one
    CPU device per worker (TensorFlow does not split a worker's CPU into replicas)."""
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.RING
    )
    handler = signal.getsignal(signal.SIGTERM)
    try:
        strategy = tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver, communication_options=options)
    except tf.errors.OpError as err:  # its gRPC server could not start: a user's port, not a bug
        raise DistcoreError(server_failure(resolver, err)) from None
    # Creating it starts TensorFlow's coordination service, whose preemption notifier puts
    # its own C++ SIGTERM handler in place of Python's: a SIGTERM would then be swallowed
    # (no stop, no exit). Give the signal back to whoever handled it before.
    if handler is not None:
        signal.signal(signal.SIGTERM, handler)
    return strategy


def server_failure(resolver, err) -> str:
    """What to say when this worker's gRPC server does not start (TensorFlow says only
    "Could not start gRPC server" when its port is taken)."""
    import tensorflow as tf

    try:
        address = resolver.cluster_spec().task_address(resolver.task_type, resolver.task_id)
    except (ValueError, KeyError, TypeError):
        address = "its TF_CONFIG address"
    reason = str(err).strip().splitlines()[0] if str(err).strip() else ""
    hint = ": is the port in use?" if isinstance(err, tf.errors.UnknownError) else ""
    return f"cannot start this worker's server on {address} ({type(err).__name__}: {reason[:200]}{hint})."


def worker_devices() -> tuple[str, ...]:
    """The devices one multi-worker worker trains on (what MultiWorkerMirroredStrategy picks)."""
    gpus = physical_gpu_count()
    return tuple(f"gpu:{i}" for i in range(gpus)) if gpus else ("cpu:0",)
