"""What the app was started with: the runs folder, the job limit, the devices it offers."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from distcore import forms, jobs, runs, settings as env
from distcore.config import DistcoreError, check_int


@dataclass(frozen=True)
class AppSettings:
    """What the app was started with; passed to every handler (no module-level state)."""

    runs_root: Path
    max_jobs: int = 2
    gpus: tuple[str, ...] = ()
    max_logical_cpus: int = 16
    tensorflow: str = "unknown"
    poll_seconds: float = 2.0
    device_note: str = ""
    offer: forms.Offer = field(default_factory=forms.Offer)  # tasks, models and data the form offers


def env_max_jobs() -> int:
    return check_int("DISTCORE_MAX_JOBS", env.get("DISTCORE_MAX_JOBS"), low=1)


def make_settings(
    runs_root=None, max_jobs=None, devices_info: dict | None = None, poll_seconds: float = 2.0
) -> AppSettings:
    info = devices_info or fallback_devices()
    root = runs.ready_root(runs_root)
    max_jobs = env_max_jobs() if max_jobs is None else max_jobs
    return AppSettings(
        runs_root=root,
        max_jobs=max_jobs,
        gpus=tuple(info.get("gpus") or ()),
        max_logical_cpus=int(info.get("max_logical_cpus") or 16),
        tensorflow=str(info.get("tensorflow", "unknown")),
        poll_seconds=poll_seconds,
        device_note=str(info.get("error", "")),
        offer=forms.make_offer(root),
    )


def detect_devices() -> dict:
    """Ask `distcore devices` once (in a subprocess); fall back to a CPU-only guess."""
    try:
        return jobs.run_cli_json(["devices"], timeout=180)
    except DistcoreError as e:
        return {**fallback_devices(), "error": f"Could not list devices ({e}); assuming CPU only."}


def fallback_devices() -> dict:
    return {"tensorflow": "unknown", "gpus": [], "cpus": 1, "max_logical_cpus": 16}
