"""The page: header, About, the four tabs, the poll timer, and what each browser keeps.

build_app composes the tabs (setup, train, evaluate, loss) and wires what spans them: one timer
polls the runs for both pickers, and the browser keeps its tab, its form and the run it follows.
"""

from __future__ import annotations

import functools
import threading
from pathlib import Path

import gradio as gr

from distcore import jobs

from . import evaluate, hosting, loss, setup, train, watch
from .format import error_md
from .settings import AppSettings, detect_devices, make_settings

hosting.patch_gradio()

STATIC = Path(__file__).resolve().parent / "static"
ABOUT_SOURCE = Path(__file__).resolve().parent.parent / "docs" / "tensorflow.md"
ABOUT_START, ABOUT_END = "<!-- about:start -->", "<!-- about:end -->"
TABS = ("setup", "train", "evaluate", "loss")

HOW_IT_RUNS = """**How it runs.** Each training run is its own process writing to its run folder
(`{root}`); the page only reads that folder, so a reload or a second browser finds the
run still going. At most {max_jobs} training jobs run at once."""


def static_text(name: str) -> str:
    """A file of webapp/static, as launch() takes it (css=, js=)."""
    return (STATIC / name).read_text(encoding="utf-8").strip()


def about_md(settings: AppSettings) -> str:
    """The About text: docs/tensorflow.md between its about markers (the docs and the app say the
    same, from one source), then how this app runs."""
    text = ABOUT_SOURCE.read_text(encoding="utf-8")
    start, end = text.find(ABOUT_START), text.find(ABOUT_END)
    if start < 0 or end < start:
        raise RuntimeError(f"{ABOUT_SOURCE} lacks its {ABOUT_START} ... {ABOUT_END} section")
    about = text[start + len(ABOUT_START) : end].strip()
    return f"\n{about}\n\n{HOW_IT_RUNS.format(root=settings.runs_root, max_jobs=settings.max_jobs)}\n"


def header_md(settings: AppSettings) -> str:
    devices = (
        ", ".join(settings.gpus)
        if settings.gpus
        else (f"CPU only, split into up to {settings.max_logical_cpus} logical devices")
    )
    note = f"\n\n{error_md(settings.device_note)}" if settings.device_note else ""
    return (
        f"# distcore: distributed training with tf.distribute\n"
        f"MirroredStrategy custom training loop on Fashion-MNIST · TensorFlow "
        f"{settings.tensorflow} · devices: {devices} · runs folder `{settings.runs_root}` · "
        f"up to {settings.max_jobs} training jobs at once.{note}"
    )


def build_app(
    runs_root=None,
    max_jobs=None,
    devices_info: dict | None = None,
    planner: jobs.Planner | None = None,
    poll_seconds: float = 2.0,
) -> gr.Blocks:
    """The whole UI. devices_info defaults to asking `distcore devices` once."""
    settings = make_settings(runs_root, max_jobs, devices_info or detect_devices(), poll_seconds)
    planner = planner or jobs.Planner()
    lock = threading.Lock()  # shared by this app's sessions: job-limit check + launch
    bind = functools.partial
    # delete_cache: exports and gallery images in Gradio's cache go after a day.
    with gr.Blocks(title="distcore", delete_cache=(3600, 86400)) as demo:
        gr.Markdown(header_md(settings))
        # Outside the tabs: Gradio renders a tab's components once it is first opened, and a
        # timer must tick for a page opened straight onto any tab.
        timer = gr.Timer(settings.poll_seconds)
        with gr.Accordion("About: what this shows, and where TensorFlow changed", open=False):
            gr.Markdown(about_md(settings))
        with gr.Tabs() as tabs:
            with gr.Tab("1 · Setup & split", id=TABS[0]) as setup_tab:
                setup_ui = setup.build(settings, planner, bind)
            with gr.Tab("2 · Train", id=TABS[1]) as train_tab:
                train_ui = train.build(settings, lock, setup_ui, bind, timer)
            with gr.Tab("3 · Evaluate", id=TABS[2]) as evaluate_tab:
                evaluate_ui = evaluate.build(settings, bind, followed=train_ui["run"])
            with gr.Tab("4 · Loss scaling", id=TABS[3]) as loss_tab:
                loss.build(settings, setup_ui, bind)
        keep_tab_in_browser(demo, tabs, [setup_tab, train_tab, evaluate_tab, loss_tab])
        # Plotly sizes a plot redrawn in a hidden tab at its default width; a resize event
        # after the tab shows makes it fill its panel again.
        train_tab.select(
            None, None, None, js="() => { setTimeout(() => window.dispatchEvent(new Event('resize')), 100); }"
        )
        lists = gr.State(None)  # per session: what the Evaluate tab's pickers show
        chosen = gr.State(None)  # per session: the run (and checkpoint) the user picked there
        evaluate_ui["run"].input(lambda name: [name, None], evaluate_ui["run"], chosen)
        evaluate_ui["checkpoint"].input(
            lambda name, ckpt: [name, ckpt], [evaluate_ui["run"], evaluate_ui["checkpoint"]], chosen
        )
        timer.tick(
            bind(watch.poll_lists, settings),
            [train_ui["labels"], evaluate_ui["run"], evaluate_ui["checkpoint"], lists, chosen, train_ui["run"]],
            [train_ui["run"], train_ui["labels"], evaluate_ui["run"], evaluate_ui["checkpoint"], lists],
            show_progress="hidden",
            concurrency_limit=8,
            api_name="poll_lists",
        )
        # Each browser keeps the run it follows, as it keeps its form and tab, so a reload (or the
        # page reloading itself after an app restart) follows that run, not another user's.
        followed = gr.BrowserState(None, storage_key="distcore-run", secret="distcore-run")
        train_ui["run"].change(lambda name: name, train_ui["run"], followed, show_progress="hidden", queue=False)
        demo.load(
            bind(watch.on_load, settings),
            followed,
            [train_ui["run"], evaluate_ui["run"], evaluate_ui["checkpoint"]],
            api_name="on_load",
        )
        keep = setup.keep_setup_in_browser(demo, setup_ui)
        # A form filled in from a run is kept too (.input events fire for typing only).
        train_ui["use_settings"].click(
            bind(train.load_run_settings, settings),
            train_ui["run"],
            [train_ui["message"], *setup.train_form(setup_ui)],
            api_name="use_run_settings",
        ).then(**keep)
    demo.planner = planner  # so main() and tests can close it
    demo.settings = settings
    return demo


def keep_tab_in_browser(demo: gr.Blocks, tabs: gr.Tabs, tab_list: list) -> None:
    """Each browser keeps the tab it is on, so the page reloading itself after an app restart
    comes back to it, and to the run it follows there."""
    kept = gr.BrowserState(TABS[0], storage_key="distcore-tab", secret="distcore-tab")
    for tab_id, tab in zip(TABS, tab_list):
        # Kept on the server: Gradio selects the first tab as a page loads, and a browser-only
        # (js) handler would store "setup" over the kept tab before it is read.
        tab.select(lambda chosen=tab_id: chosen, None, kept, show_progress="hidden", queue=False)
    demo.load(
        lambda tab_id: gr.Tabs(selected=tab_id) if tab_id in TABS[1:] else gr.skip(), kept, tabs, show_progress="hidden"
    )


def launch(demo: gr.Blocks, host: str, port: int) -> None:
    """Serve the app (blocks until the server stops), with the page's own CSS and script."""
    demo.queue(default_concurrency_limit=2).launch(
        server_name=host,
        server_port=port,
        css=static_text("app.css"),
        js=static_text("app.js"),
        show_error=False,
        state_session_capacity=hosting.SESSIONS_KEPT,
    )
