"""The Compare tab's API endpoints (gr.api): named parameters in, plain JSON out, errors as
gr.Error with distcore's message. The page's own buttons use webapp.compare's handlers, which
answer in Markdown and keep their events off the API page."""

from __future__ import annotations

import gradio as gr

from distcore import compare, manage, sweep
from distcore.config import DistcoreError, check_int

from .settings import AppSettings


def answer(fn, *args):
    try:
        return fn(*args)
    except DistcoreError as e:
        raise gr.Error(str(e)) from None


def add_endpoints(settings: AppSettings) -> None:
    root = settings.runs_root

    def compare_runs(runs: list[str], x_axis: str = "step", smoothing: float = 0.6) -> dict:
        """The runs' curves (loss against x_axis: step, examples or time; per-epoch test
        accuracy and loss; examples/s; system samples) and the settings that differ."""
        return answer(compare.comparison, root, runs, x_axis, smoothing)

    def list_runs() -> list[dict]:
        """The runs folder's runs, newest first: what the Compare table shows."""
        return answer(compare.table, root)

    def rename_run(run: str, new_name: str) -> dict:
        """Rename a run that is not training."""
        return answer(manage.rename_run, root, run, new_name)

    def delete_run(run: str) -> dict:
        """Delete a run that is not training, with all its files."""
        return answer(manage.delete_run, root, run)

    def run_notes(run: str, notes: str) -> dict:
        """Keep a short note (at most 500 characters) in the run's folder; empty removes it."""
        return answer(manage.write_notes, root, run, notes)

    def start_sweep(replicas: str = "1,2", per_replica_batch: int = 64, max_steps: int = 40) -> dict:
        """Start a scaling sweep in the background; poll its record with sweep_record."""

        def start():
            plan = sweep.Sweep(
                replicas=sweep.int_list(replicas, "replicas", settings.max_logical_cpus),
                per_replica_batch=check_int("per_replica_batch", per_replica_batch),
                max_steps=check_int("max_steps", max_steps),
            )
            return {"sweep": sweep.start(root, plan, settings.max_jobs)}

        return answer(start)

    def sweep_record(name: str = "") -> dict:
        """A sweep's record (the newest without a name): its state, entries and what limits scaling."""
        names = sweep.list_records(root)
        name = name or (names[0] if names else "")
        if name not in names:
            raise gr.Error(f"there is no sweep named {name!r}." if name else "no sweep has run here yet.")
        return sweep.read_record(root, name) or {}

    for fn, name in (
        (compare_runs, "compare_runs"),
        (list_runs, "list_runs"),
        (rename_run, "rename_run"),
        (delete_run, "delete_run"),
        (run_notes, "run_notes"),
        (start_sweep, "sweep"),
        (sweep_record, "sweep_record"),
    ):
        gr.api(fn, api_name=name)
