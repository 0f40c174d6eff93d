"""The outer loop: how many steps per call, when to test, checkpoint, log and stop.

Like orbit's Controller, it drives `loop.StepRunner` in chunks of
`steps_per_loop` steps and owns the run directory: config.json, metrics.jsonl,
status.json, TensorBoard events and checkpoints.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import tempfile
import time
import warnings
from pathlib import Path

import tensorflow as tf

from . import (
    checkpoints,
    cluster,
    data as data_lib,
    datasets,
    devices,
    events,
    inputs,
    runs,
    stopping,
    sysmetrics,
    tasks,
)
from .config import DistcoreError, TrainConfig, data_folder, error_line as failure_message
from .loop import SUM, StepRunner
from .stopping import StopFlag


def train_examples(config: TrainConfig, data, epoch: int, skip_batches: int):
    """The epoch's shuffled examples, minus the batches a resumed run already trained on."""

    def make():
        if isinstance(data, datasets.Datasets):  # the caller's pipeline orders its epoch itself
            ds = data.train(epoch, config.seed).take(config.train_examples)
            ds = inputs.whole_global_batches(
                ds, config.train_examples, config.global_batch, config.api, config.drop_remainder
            )
            return ds.skip(skip_batches * config.global_batch) if skip_batches else ds
        files = inputs.train_records(data, config.train_examples) if config.policy == "file" else None
        with inputs.seeded(config.seed):  # a shuffle's order follows the global seed too
            if files:  # FILE sharding needs a dataset read from files (the built-in datasets' only)
                ds = inputs.from_records(files, seed=config.seed, epoch=epoch, limit=config.train_examples)
            else:
                n = config.train_examples
                ds = inputs.in_memory(data.train_images[:n], data.train_labels[:n], seed=config.seed, epoch=epoch)
        ds = inputs.whole_global_batches(
            ds, config.train_examples, config.global_batch, config.api, config.drop_remainder
        )
        # Batches are contiguous slices of the shuffled order, so skipping k*G examples
        # before batching resumes exactly at global batch k.
        return ds.skip(skip_batches * config.global_batch) if skip_batches else ds

    return make


def test_dataset(strategy, config: TrainConfig, data):
    n = config.test_examples
    if isinstance(data, datasets.Datasets):
        make = lambda: data.test().take(n)  # noqa: E731
    else:
        make = lambda: inputs.in_memory(data.test_images[:n], data.test_labels[:n])  # noqa: E731
    # Arrays in memory have no files: across workers FILE would be TensorFlow's error, and
    # AUTO would fall back to DATA.
    policy = "data" if config.policy == "file" else config.policy
    return inputs.distribute(
        strategy,
        make,
        global_batch=config.global_batch,
        api="dataset",
        policy=policy,
        drop_remainder=False,
        transform=inputs.transform_for(data),
    )


def worker_scratch() -> Path:
    """A new folder for a non-chief worker's throwaway writes (removed when its run ends).

    The folder's name holds the worker's pid. A worker killed with SIGKILL cannot remove
    its folder, so the folders of workers no longer alive are removed here.
    """
    for old in Path(tempfile.gettempdir()).glob("distcore-worker-*-*"):
        pid = old.name.split("-")[2]
        if pid.isdigit() and not runs.pid_alive(pid):
            shutil.rmtree(old, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"distcore-worker-{os.getpid()}-"))


def locate_data(config: TrainConfig, run_dir: Path, resume: bool, on_note) -> Path:
    """The data folder. A resume given no --data-dir reads it from the run's config.json,
    and where that folder is gone, reads the data from the usual places (data.locate)."""
    saved = runs.read_json(run_dir / "config.json") if resume else None
    from_run = bool(saved) and config.data_dir is not None and data_folder(saved.get("data_dir")) == config.data_dir
    return data_lib.locate(config.data_dir, saved_in=run_dir / "config.json" if from_run else None, on_note=on_note)


# The one check of a resume lives with the run directories (no TensorFlow there), so the
# cluster launcher and the app can make it before they start any process.
resume_config = runs.resume_config


class Controller:
    """One training run: `Controller(config, run_dir)` sets it up (data, strategy, model, and for
    a resume the newest checkpoint) and holds the run directory; `run()` trains it. This is the
    outer loop (when to log, test, checkpoint and stop); one step is `loop.StepRunner`'s.
    """

    def __init__(
        self,
        config: TrainConfig,
        run_dir,
        *,
        resume: bool = False,
        stop: StopFlag | None = None,
        on_record=None,
        task=None,
        data=None,
    ):
        """`config` is the run's configuration; for a resume, build it with `runs.resume_config`
        (also `controller.resume_config`) and pass `resume=True`. `stop`: a `StopFlag` whose
        `set()`, from any thread, stops `run()` at the end of its loop with a checkpoint.
        `on_record(record)` is called with each record as it is written to `metrics.jsonl`.
        `task`: a `distcore.Task` object to train (default: the one config.task names); `data`: a
        `distcore.Arrays` for config.data "arrays" (kept in the run folder as data.npz).

        With `config.workers > 1` this process is one worker of a TF_CONFIG cluster:
        the chief writes `run_dir`, the others a temporary folder of their own.
        """
        self.closed = True  # until set up: __del__ has nothing to let go of
        check_arguments(config, stop, on_record)
        self.config, self.run_dir = config, runs.run_path(run_dir)
        self.given_task, self.given_data = task, data
        self.stop = stop or StopFlag()
        self.on_record = on_record or (lambda record: None)
        self.lock = self.write_dir = self.sampler = None
        self.task = cluster.Task(workers=1, index=0)
        self.wrote_config = self.ran = self.closed = False
        self.status_before = self.resumed_config = None
        self.told_diverged = self.told_short = False
        try:
            self.claim(resume)
        except BaseException as err:
            self.release()  # a notebook's next try must not find the run locked by this one
            self.closed = True
            failure = self.let_go(err, resume)
            if failure is not err:
                raise failure from None
            raise

    def let_go(self, err: BaseException, resume: bool) -> BaseException:
        """After the set-up failed, or was interrupted (a notebook's Ctrl-C): leave the run as
        the next try needs it, and return what to raise."""
        if isinstance(err, DistcoreError) and self.config.workers > 1 and not hasattr(self, "strategy"):
            err = cluster.peers_wait(err)  # not connected yet
        # Refused before anything changed: put back, so a finished run does not read "failed", or "stopped" at
        # 938 of 1876, nor, with workers whose flags differ, "failed · 63 / 126" beside a config.json of 63,
        # nor "failed" when resumed with a model its checkpoints do not fit.
        if resume and (
            isinstance(err, (KeyboardInterrupt, cluster.FlagsDiffer, checkpoints.Mismatch)) or not self.wrote_config
        ):
            self.put_back()
            return err
        if not self.wrote_config:
            return err
        if not resume and not runs.list_checkpoints(self.run_dir):  # nothing trained: the same call, fixed,
            (self.run_dir / "config.json").unlink(missing_ok=True)  # starts it (not "already holds a run")
        state, message = (
            ("stopped", stopping.BEFORE_TRAINING)
            if isinstance(err, KeyboardInterrupt)
            else ("failed", failure_message(err))
        )
        stopping.mark_state(self.run_dir, os.getpid(), state, message, only_from="starting")
        return err

    def claim(self, resume: bool) -> None:
        """Everything up to the first step: the task, the data, the run directory, the strategy."""
        config = self.config
        if not tf.executing_eagerly():  # here, not at the first step, which would leave the run "starting"
            raise DistcoreError(
                "distcore needs TensorFlow's eager execution, which is on unless turned off "
                "(tf.compat.v1.disable_eager_execution()): train in a process that leaves it on."
            )
        devices.check_thread_variables()
        if config.workers > 1:
            self.task = cluster.current_task()
        if self.task.workers != config.workers:
            raise DistcoreError(f"TF_CONFIG names {self.task.workers} workers but the run is for {config.workers}.")
        self.write_dir = self.run_dir if self.task.is_chief else worker_scratch()
        if config.workers == 1:
            devices.prepare(config.devices)  # logical devices and threads, so config.json can record them
            differ = devices.threads_differ(config.devices)
            if differ:
                warnings.warn(differ, stacklevel=3)
        # Found before the run directory is claimed, so a mistyped --data-dir leaves no config.json
        # for the corrected command to find "already holds a run". (Read after it, so a stop is
        # honoured while the files are read.)
        notes = []
        self.task_object = tasks.from_config(config, self.run_dir, given=self.given_task)
        examples = self.read_data(resume, notes)
        self.prepare_dir(resume)
        self.set_up(examples, resume, notes)

    def read_data(self, resume: bool, notes: list[str]):
        """The run's examples, checked against the task before the run folder is touched (a mistyped
        --data-dir or a model that does not fit the data leaves no config.json behind). Fashion-MNIST
        for the built-in classifier is only located here and read after the folder is claimed, so a
        stop is honoured while the files are read."""
        config = self.config
        if isinstance(self.given_data, datasets.Datasets):
            if config.data != datasets.DATASETS:
                raise DistcoreError("data=Datasets(...) needs a configuration whose data is 'datasets'.")
            self.given_data.check()
            self.task_object.check_data(self.given_data)
            return self.given_data
        if self.given_data is not None:
            if not isinstance(self.given_data, datasets.Arrays):
                raise DistcoreError(
                    f"data must be a distcore.Arrays or distcore.Datasets, not {type(self.given_data).__name__}."
                )
            if config.data != datasets.ARRAYS or resume:
                raise DistcoreError(
                    "data=Arrays(...) is for a new run whose configuration says data='arrays' (distcore.train "
                    "sets it); a resume reads the arrays the run folder keeps."
                )
            examples = self.given_data.examples()
        elif config.data == "fashion-mnist":
            folder = locate_data(config, self.run_dir, resume, notes.append)
            built_in = type(self.task_object) is tasks.Classifier and config.model in tasks.BUILT_IN_MODELS
            if built_in:
                return folder
            examples = data_lib.read_dir(folder)
        else:
            examples = datasets.load(config.data, data_dir=config.data_dir, run_dir=self.run_dir)
        examples = data_lib.subset(examples, config.train_examples, config.test_examples)
        self.task_object.check_data(examples)
        return examples

    def set_up(self, examples, resume: bool, notes: list[str]) -> None:
        config = self.config
        if isinstance(examples, Path):
            examples = data_lib.subset(data_lib.read_dir(examples), config.train_examples, config.test_examples)
        self.data = examples
        if config.workers > 1:
            with self.stop.while_connecting(
                announce=self.waiting_message(), remind=self.still_waiting_message(), put_back=self.status_before
            ):
                self.strategy = devices.make_multiworker_strategy()
            self.check_same_flags(resume)  # before any other collective: mismatched ones hang
        else:
            self.strategy = devices.make_strategy(config.devices)
        self.runner = StepRunner(self.strategy, config, self.task_object)
        if self.task.is_chief and not resume and isinstance(self.task_object, tasks.Classifier):
            self.task_object.save_architecture(self.run_dir)
        self.saver = checkpoints.Saver(
            self.runner.checkpoint(),
            self.write_dir / "checkpoints",
            read_folder=self.run_dir / "checkpoints",
            keep=config.keep_checkpoints,
            required=self.runner.checkpoint(random=False),
        )
        self.resume, self.resumed_from = resume, None
        if resume:
            self.resumed_from = self.restore(notes.append)
            if self.task.is_chief:  # steps after the checkpoint were lost; so are their records
                self.roll_back(int(self.runner.step.numpy()), int(self.runner.epoch.numpy()))
        self.metrics = runs.MetricsLog(self.write_dir)
        for message in notes:
            self.log_event("fallback", message)
        self.writer = events.writer(self.write_dir / "logs")
        self.write_series = {name: events.series_writer(self.writer, f"train/{name}") for name in self.runner.names}
        if self.sampler is not None:
            # The sampler's thread holds the runner's step, never the Controller: a Controller
            # dropped unrun is collected, and its __del__ lets go of the run.
            step = self.runner.step
            self.sampler.attach(self.writer, lambda: int(step.numpy()))
        self.test_data = test_dataset(self.strategy, config, self.data)
        self.any_stop = tf.function(self._any_stop) if config.workers > 1 else None
        self.first_chunk_done = False
        self.test_seconds = None  # the last test pass's, for the ETA
        self.last_timing = None  # (examples/s, seconds per step) of the last timed chunk
        self.tested_once = False

    def roll_back(self, step: int, epochs: int) -> None:
        """Forget what was logged after the restored checkpoint: it is trained again."""
        reclosed = {r["step"] for r in runs.read_metrics(self.write_dir) if runs.reopened(r, epochs)}
        runs.truncate_metrics(self.write_dir, step, epochs=epochs)
        events.roll_back(self.write_dir / "logs", step, reclosed)

    def waiting_message(self) -> str:
        """What a bare worker says while it waits for its peers (StopFlag.while_connecting)."""
        others = [a for i, a in enumerate(self.task.addresses) if i != self.task.index]
        return (
            f"worker {self.task.index}: waiting for the other workers ({', '.join(others)}) to connect. "
            "Ctrl-C stops every worker at step 0 once all have connected; a second Ctrl-C "
            "(half a second later or more) leaves at once."
        )

    def still_waiting_message(self) -> str:
        """What a bare worker says when its wait goes on (TensorFlow's has no end of its own)."""
        return (
            f"worker {self.task.index}: still waiting for the other workers. Check that each is started, "
            "that this host can reach it at that address, and that every worker was given the same list "
            f"of workers in the same order ({', '.join(self.task.addresses)}): a worker given another list "
            "waits for workers that never come."
        )

    def check_same_flags(self, resume: bool) -> None:
        """Every worker must train the same run: compare what each was given, in one all-gather.

        Workers given different flags otherwise train on (a batch of 64 against 32 ends with
        the chief "finished at step 63 of 32"), or wait forever in collectives that do not
        match (--steps-per-loop 20 against 7). Each field travels as one int64, so the
        message can name the fields, and their values where they are numbers or choices.
        """
        fields = cluster.agreement(self.config, resume)
        codes = tf.constant([[cluster.code(v) for v in fields.values()]], tf.int64)
        gather = tf.function(
            lambda: self.strategy.run(  # (eagerly, TensorFlow warns of its overhead)
                lambda: tf.distribute.get_replica_context().all_gather(codes, axis=0)
            ),
            autograph=False,
        )
        try:
            rows = self.strategy.experimental_local_results(gather())[0].numpy()
        except tf.errors.OpError as err:
            raise self.cluster_failure(err) from None
        problem = cluster.disagreement(fields, rows.tolist(), replicas_per_worker=len(self.config.devices))
        if problem:
            raise cluster.FlagsDiffer(f"worker {self.task.index}: {problem}")

    def cluster_failure(self, err: tf.errors.OpError) -> DistcoreError:
        return DistcoreError(
            f"worker {self.task.index}: the cluster lost a peer or a collective failed ({failure_message(err)[:300]})."
        )

    def restore(self, on_fallback) -> str | None:
        """Restore the newest intact checkpoint and return its name; None for a run that
        stopped or failed before it saved one, which then trains again from step 0."""
        never_saved = not any(r.get("event") == "checkpoint" for r in runs.read_metrics(self.run_dir))
        if never_saved and not runs.list_checkpoints(self.run_dir):
            return None
        try:
            return self.saver.restore_latest(on_fallback=on_fallback)  # saved ones that are gone: an error
        except tf.errors.OpError as err:  # only a peer's failure gets here (checkpoints.PEER_ERRORS)
            if self.config.workers > 1:
                raise self.cluster_failure(err) from None
            raise

    def close(self) -> None:
        """Let go of the run directory (run() does when it ends), so another Controller may train
        it. Closed before it ran, it leaves a new run as a set-up stopped before training does
        ("stopped before training began", its name free again), and a resumed one as it was
        (not a run that reads "died" under a name that stays taken)."""
        if self.wrote_config and not self.ran and not self.closed:
            self.let_go(KeyboardInterrupt(), self.resumed_config is not None)
        self.closed = True
        self.release()

    def put_back(self) -> None:
        """A resume that did not begin training leaves the run as it was: its status, and its
        config.json, which is only written when training begins (so a closed resume Controller's
        raised epochs are not saved for a plain resume to train on)."""
        if self.status_before:
            stopping.put_status_back(self.run_dir, os.getpid(), self.status_before)
        else:
            self.stop.withdraw()  # the CLI's "starting", written before the Controller

    def __enter__(self):
        return self

    def __exit__(self, *_) -> None:
        self.close()

    def __del__(self) -> None:
        # Dropped unrun, as a notebook's next cell drops the one before: as close() leaves it.
        with contextlib.suppress(Exception):  # (attributes or modules gone at interpreter exit)
            if not self.closed:
                self.close()

    def release(self) -> None:
        """Unlock the run, and remove a non-chief worker's scratch folder (a worker refused
        before training too)."""
        if self.sampler is not None:
            self.sampler.stop()
        if self.lock is not None:
            self.lock.release()
        if self.write_dir is not None and not self.task.is_chief:
            shutil.rmtree(self.write_dir, ignore_errors=True)

    def lock_run(self) -> runs.RunLock:
        try:
            return runs.RunLock(self.run_dir)
        except runs.RunHeld as err:  # a held lock only: a failed write (a full disk) is not the task indices'
            if self.config.workers == 1:
                raise
            # Two chiefs of one run: two workers given index 0 are told so, not only "stop it".
            raise DistcoreError(
                f"{err} If that is another worker of this cluster, two workers have the same task "
                f"index in TF_CONFIG: give each its own, 0 to {self.config.workers - 1}."
            ) from None

    def prepare_dir(self, resume: bool) -> None:
        config_path = self.run_dir / "config.json"
        if resume and not config_path.is_file():
            raise DistcoreError(f"cannot resume: {self.run_dir} has no config.json (no run was started there).")
        if not self.task.is_chief:
            return  # the chief checks and writes the run directory
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise runs.unwritable(self.run_dir, err) from None
        self.lock = self.lock_run()  # before the checks: two new runs passed them together
        self.check_dir(resume)
        try:
            record = {
                **self.config.to_dict(),
                "tensorflow": tf.__version__,
                "keras": _keras_version(),
                "replicas": self.config.replicas,
                "physical_devices": [d.name for d in tf.config.list_physical_devices()],
                "intra_op_threads": devices.intra_op_setting(),
            }  # 0: TensorFlow's default
            if resume:
                self.resumed_config = record  # written when training begins (put_back)
            else:
                runs.write_json_atomic(config_path, record)
            self.wrote_config = True
            # Before the slow set-up: from here a stop request is honoured (the caller
            # installed the signal handler first), so say the process is there.
            self.status_before = self.stop.status_before(self.run_dir) if resume else None  # for put_back()
            previous_step = (self.status_before or {}).get("step", 0)
            if not resume:  # the run's own copy of the user's data: resume and evaluate read it
                if isinstance(self.given_data, datasets.Arrays):
                    self.given_data.save(self.run_dir / datasets.RUN_DATA_FILE)
                elif self.given_data is None:
                    datasets.keep_copy(self.config.data, self.run_dir)
            runs.write_json_atomic(
                self.run_dir / "status.json",
                {
                    "state": "starting",
                    "pid": os.getpid(),
                    "step": previous_step,
                    "total_steps": self.config.total_steps(),
                    "time": time.time(),
                },
            )
            self.sampler = sysmetrics.Sampler(self.run_dir).start()  # the chief's CPU and memory, until release()
        except OSError as err:
            raise runs.unwritable(self.run_dir, err) from None

    def check_dir(self, resume: bool) -> None:
        """A new run needs an empty directory; a resume, this run's own configuration. The CLI
        and the app check a resume before they launch (resume_config); a library caller may
        not have, and a changed batch would resume "10 batches" of 32 into an epoch of 64s."""
        if not resume:
            runs.check_new(self.run_dir)
            return
        saved = runs.saved_config(self.run_dir)
        runs.refuse_changes(self.run_dir, saved, self.config)
        runs.check_steps_left(self.run_dir, saved, self.config)  # not "finished at step 564 of 188"

    def _any_stop(self, flag):
        """True on every worker if any worker was asked to stop: workers must leave the
        loop at the same step, or the others would wait in an all-reduce forever."""
        votes = self.strategy.run(lambda: tf.identity(flag))
        return self.strategy.reduce(SUM, votes, axis=None) > 0

    def stopping(self) -> bool:
        if self.any_stop is None:
            return self.stop.is_set()
        return bool(self.any_stop(tf.constant(1.0 if self.stop.is_set() else 0.0)))

    # --- records ------------------------------------------------------------------------

    def emit(self, record: dict) -> dict:
        record = self.metrics.write(record)
        self.on_record(record)
        return record

    def log_event(self, event: str, message: str = "", **extra) -> None:
        self.emit({"event": event, "step": int(self.runner.step.numpy()), "message": message, **extra})

    def set_status(self, state: str, **extra) -> None:
        record = {
            "state": state,
            "pid": os.getpid(),
            "step": int(self.runner.step.numpy()),
            "total_steps": self.config.total_steps(),
            "time": time.time(),
            **extra,
        }
        runs.write_status(self.write_dir, record)

    # --- the loop -----------------------------------------------------------------------

    def run(self) -> dict:
        """Train until the configuration's epochs (or max steps) are done, or a stop: `StopFlag.set()`,
        or in the main thread a Ctrl-C (a second one interrupts at once, raising KeyboardInterrupt).
        Returns {"state": "finished" or "stopped", "step": ..., "total_steps": ...}; a checkpoint is
        saved either way. Once: make a new Controller to train the run again."""
        if self.closed:  # without the run's lock it would train beside another process
            raise DistcoreError(
                f"this Controller has let go of {self.run_dir} (it ran, or close() was called): "
                "to train the run, make a new one: Controller(resume_config(run_dir), run_dir, "
                "resume=True) to continue it, or Controller(config, run_dir) if it never trained."
            )
        self.ran = True
        step = int(self.runner.step.numpy())
        total = self.config.total_steps()
        # From here a stop request waits for the loop: set before the start event, so a stop
        # between the two cannot end the process with the start logged and no end.
        self.stop.training = True
        try:  # the start event too: a full disk by then fails the run, not leaves it "starting" (read as died)
            if self.resumed_config is not None:
                runs.write_json_atomic(self.run_dir / "config.json", self.resumed_config)
            self.log_event(*self.start_event(step, total))
            self.set_status("running")
            with self.stop.interrupts():
                self.test_unlogged(step)
                while not self.finished() and not self.stopping():
                    self.run_epoch(total)
            step = int(self.runner.step.numpy())
            state = "finished" if self.finished() else "stopped"
            self.save_checkpoint(step)
            self.log_event(state, f"{state} at step {step} of {total}")
            self.set_status(state)
            return {"state": state, "step": step, "total_steps": total}
        except BaseException as err:
            state, message = (
                ("stopped", self.interrupted_message())
                if isinstance(err, KeyboardInterrupt)
                else ("failed", failure_message(err))
            )  # a second Ctrl-C is deliberate: "stopped", not "failed"
            detail = {"detail": str(err)} if isinstance(err, tf.errors.OpError) else {}  # for the post-mortem
            for record in (
                lambda: self.log_event(state, message),
                lambda: self.set_status(state, message=message, **detail),
            ):
                # Each where it can: a full metrics.jsonl, or an on_record that fails again on the
                # "failed" record, must not leave status.json "running" (read as "died").
                with contextlib.suppress(Exception):
                    record()
            if self.config.workers > 1 and isinstance(err, tf.errors.OpError):
                raise self.cluster_failure(err) from None
            raise
        finally:
            if self.sampler is not None:  # its last sample, before the writer closes
                self.sampler.stop()
            self.metrics.close()
            with contextlib.suppress(tf.errors.OpError):  # its last flush fails again on a full disk
                self.writer.close()
            self.close()

    def interrupted_message(self) -> str:
        saved = runs.list_checkpoints(self.write_dir)
        return (
            f"interrupted at step {int(self.runner.step.numpy())} (a second Ctrl-C), with no checkpoint there: "
            f"a resume continues from {saved[-1] if saved else 'step 0'}"
        )

    def test_unlogged(self, step: int) -> None:
        """Test the checkpoint resumed from when the log has no record of it (its process was
        killed between saving it and logging it), so the log holds every checkpoint's test
        accuracy, to check `evaluate` against. Every worker
        reads the chief's log, so all of them take the test pass, or none."""
        logged = any(r.get("event") == "checkpoint" and r.get("step") == step for r in runs.read_metrics(self.run_dir))
        if not self.resumed_from or logged:
            return
        tested = self.test_pass()
        self.emit(
            {
                "event": "checkpoint",
                "step": step,
                "checkpoint": self.resumed_from,
                **tested,
                "message": f"{self.resumed_from}, tested now: its process ended before it logged it",
            }
        )

    def start_event(self, step: int, total: int) -> tuple[str, str]:
        if self.resumed_from:
            return "resume", f"resumed from {self.resumed_from} at step {step} on {self.where()}"  # may differ
        if self.resume:
            return "resume", (
                f"no checkpoint to resume from (the run stopped or failed before saving one): "
                f"training from step 0, {total} steps on {self.where()}"
            )
        return "start", f"training {total} steps on {self.where()}"

    def where(self) -> str:
        local = ", ".join(self.config.devices)
        return f"{self.config.workers} workers x [{local}]" if self.config.workers > 1 else local

    def finished(self) -> bool:
        max_steps = self.config.max_steps
        return int(self.runner.epoch.numpy()) >= self.config.epochs or bool(
            max_steps and int(self.runner.step.numpy()) >= max_steps
        )

    def run_epoch(self, total: int) -> None:
        """Train until the epoch's data runs out, the step limit, or a stop request."""
        epoch = int(self.runner.epoch.numpy())
        step = int(self.runner.step.numpy())
        if self.epoch_done():  # a checkpoint of older distcore, saved before the epoch was closed
            self.end_epoch(epoch + 1, step)
            return
        examples = train_examples(self.config, self.data, epoch, int(self.runner.epoch_steps.numpy()))
        dist = inputs.distribute(
            self.strategy,
            examples,
            global_batch=self.config.global_batch,
            api=self.config.api,
            policy=self.config.policy,
            drop_remainder=self.config.drop_remainder,
            transform=inputs.transform_for(self.data),
        )
        pipeline = [dist, inputs.train_iterator(self.strategy, dist)]
        del dist  # the list holds the only references, so drop_later frees them off this thread
        try:
            self.train_epoch(pipeline[1], epoch, step, total)
        finally:
            inputs.drop_later(pipeline)

    def train_epoch(self, iterator, epoch: int, step: int, total: int) -> None:
        limit = self.config.max_steps or float("inf")
        timed = False  # an epoch's first chunk starts its iterator (a shuffle of the whole epoch):
        # often a few steps to the next loop boundary, its 44-800 examples/s among ~5,000
        # would give an ETA of 5 min for 55 s. The process's first chunk also traces.
        while step < limit and not self.stopping():
            chunk = int(min(self.steps_to_boundary(step), limit - step, self.steps_to_checkpoint(step)))
            started = time.perf_counter()
            values, counts = self.runner.train_steps(iterator, tf.constant(chunk, tf.int32))
            values, counts = values.numpy(), counts.numpy()  # the one host sync per chunk
            elapsed = time.perf_counter() - started
            if len(values):
                self.log_steps(step, epoch + 1, values, counts, elapsed if timed else None)
                step += len(values)
                if timed:
                    self.last_timing = (float(counts.sum() / elapsed), elapsed / len(values))
                # An untimed chunk shows the last timed one's speed, else none (after a resume a
                # traced chunk would claim minutes for seconds).
                speed, step_seconds = self.last_timing or (None, None)
                self.set_status(
                    "running",
                    epoch=epoch + 1,
                    examples_per_sec=speed,
                    eta_seconds=self.eta(step, total, step_seconds) if step_seconds else None,
                )
            timed = True
            # Closed before any checkpoint of this step is saved: a checkpoint of the epoch's
            # last step must hold the closed epoch, or a resume from it retrains nothing.
            if len(values) < chunk or self.epoch_done():  # the iterator ran out, or is about to
                self.tell_short_epoch(epoch + 1)
                self.end_epoch(epoch + 1, step)
                return
            if self.config.checkpoint_every and step % self.config.checkpoint_every == 0:
                self.save_checkpoint(step)

    def tell_short_epoch(self, epoch: int) -> None:
        """Say once when an epoch of a Datasets' pipeline ended before its train_examples: the
        run then ends before its planned steps, and its epochs are shorter than configured."""
        done, planned = int(self.runner.epoch_steps.numpy()), self.config.steps_per_epoch()
        if done < planned and isinstance(self.data, datasets.Datasets) and not self.told_short:
            self.told_short = True
            self.log_event(
                "warning",
                f"epoch {epoch} of Datasets.train ended after {done} of its {planned} steps: it gave fewer than "
                f"train_examples ({self.config.train_examples}) examples, so each epoch is shorter and the run ends "
                "before its planned steps. Give train_examples as many as it gives.",
            )

    def epoch_done(self) -> bool:
        """True when every batch of the current epoch has been trained on."""
        return int(self.runner.epoch_steps.numpy()) == self.config.steps_per_epoch()

    def steps_to_boundary(self, step: int) -> int:
        """Chunks end on multiples of steps_per_loop; a process's very first chunk is one
        step, so the first step's record (and its loss) appears as soon as tracing is done."""
        if not self.first_chunk_done:
            self.first_chunk_done = True
            return 1
        return self.config.steps_per_loop - step % self.config.steps_per_loop

    def steps_to_checkpoint(self, step: int) -> int:
        every = self.config.checkpoint_every
        return every - step % every if every else self.config.steps_per_loop

    def log_steps(self, first_step, epoch, values, counts, elapsed):
        """Step records, one scalar per task metric ("loss"; the GAN's "d_loss" and "g_loss");
        `elapsed` None for a chunk that traced or started an epoch's iterator, whose 7-800
        examples/s say nothing of the speed (in metrics.jsonl, the CSV export and TensorBoard alike)."""
        speed = {} if elapsed is None else {"examples_per_sec": round(float(counts.sum() / elapsed), 1)}
        names = self.runner.names
        for i, (row, count) in enumerate(zip(values, counts)):
            scalars = {name: float(row[j]) for j, name in enumerate(names)}
            self.emit({"step": first_step + i + 1, "epoch": epoch, **scalars, "examples": int(count), **speed})
            diverged = next((name for name, value in scalars.items() if not math.isfinite(value)), None)
            if diverged and not self.told_diverged:  # once a process: every later step is NaN too
                self.told_diverged = True
                self.log_event(
                    "warning",
                    f"the {diverged} is {scalars[diverged]} at step {first_step + i + 1}: training diverged. A lower "
                    "learning rate usually keeps it finite; the steps before are in the checkpoints saved so far.",
                )
        steps = tf.range(first_step + 1, first_step + 1 + len(values), dtype=tf.int64)
        with events.summaries(self.writer, self.write_dir / "logs"):
            for j, name in enumerate(names):
                self.write_series[name](steps, tf.constant(values[:, j], tf.float32))
            if speed:
                tf.summary.scalar("train/examples_per_sec", speed["examples_per_sec"], step=first_step + len(values))

    def end_epoch(self, epoch: int, step: int) -> None:
        trained = self.runner.end_epoch()
        tested = self.test_pass()
        record = {"epoch": epoch, "step": step, **trained, **tested}
        self.emit(record)
        with events.summaries(self.writer, self.write_dir / "logs"):
            for key in (*trained, *tested):
                tf.summary.scalar(f"epoch/{key}", record[key], step=step)
        self.save_checkpoint(step, tested=tested)

    def write_artifacts(self, step: int) -> None:
        """The task's own files (the GAN's image grid), by the chief only."""
        if self.task.is_chief:
            self.task_object.artifacts(self.run_dir, step)

    def test_pass(self) -> dict:
        """The test set's loss and accuracy; its time goes into the ETA (run at every checkpoint
        and epoch end; left out, an ETA of 0.55 s comes true 8.7 s later), but not the first
        pass's, which also traces: counted at 3x, it predicts the end of a 15 s run 10 s late."""
        started = time.perf_counter()
        result = self.runner.run_test(self.test_data)
        if self.tested_once:  # the process's first pass also traces the test step: 2-4x as long
            self.test_seconds = time.perf_counter() - started
        self.tested_once = True
        return result

    def eta(self, step: int, total: int, step_seconds: float) -> float:
        passes = remaining_test_passes(self.config, step, total)
        pass_seconds = guess_test_seconds(self.config, step_seconds) if self.test_seconds is None else self.test_seconds
        return max(total - step, 0) * step_seconds + passes * pass_seconds

    def save_checkpoint(self, step: int, tested=None) -> None:
        if step == 0 or self.saver.has(step):
            return
        tested = tested or self.test_pass()
        name = self.saver.save(step)
        self.write_artifacts(step)
        self.emit({"event": "checkpoint", "step": step, "checkpoint": name, **tested})


TEST_EXAMPLE_COST = 0.5  # of a training example's time (measured 0.4-0.6 at 1 and 4 replicas)


def check_arguments(config, stop, on_record) -> None:
    """Wrong types are refused with what is allowed, not as AttributeErrors deep inside."""
    if not isinstance(config, TrainConfig):
        raise DistcoreError(
            f"config must be a TrainConfig, not {type(config).__name__}: build one with "
            "TrainConfig(...), TrainConfig.from_dict(d) from a dict, or resume_config(run_dir)."
        )
    if stop is not None and not isinstance(stop, StopFlag):
        raise DistcoreError(f"stop must be a StopFlag (from distcore.stopping import StopFlag), not {stop!r}.")
    if on_record is not None and not callable(on_record):
        raise DistcoreError(f"on_record must be a function of one record (a dict), not {on_record!r}.")


def guess_test_seconds(config: TrainConfig, step_seconds: float) -> float:
    """A test pass's time before this process has timed one, from the training speed. A test
    example takes a forward pass, a third of a training example's arithmetic, but a pass has
    its own overheads: 10,000 test images took 0.37-0.49 s at 9,000-10,000 training examples/s
    on a quiet machine, and about 0.6 of the training time per example on a busy one. Counting
    nothing would say "ETA 1s" for 8 s after a resume or before a new run's first checkpoint."""
    return config.test_examples / config.global_batch * step_seconds * TEST_EXAMPLE_COST


def remaining_test_passes(config: TrainConfig, step: int, total: int) -> int:
    """Test passes still to come after `step`: one at each checkpoint (every checkpoint_every
    steps), each epoch end and the last step, the steps where two meet counted once."""

    def multiples(n: int) -> int:  # of n in (step, total]
        return total // n - step // n

    every, epoch = config.checkpoint_every, config.steps_per_epoch()
    count = multiples(epoch) + (multiples(every) - multiples(math.lcm(every, epoch)) if every else 0)
    last_counted = total % epoch == 0 or (every and total % every == 0)
    return count + (0 if last_counted or total <= step else 1)


def _keras_version() -> str:
    import keras

    return keras.__version__
