"""The page: header, About, the five tabs, the poll timer, and what each browser keeps.

build_app composes the tabs (setup, train, evaluate, loss, compare) and wires what spans them: one timer
polls the runs for both pickers, and the browser keeps its tab, its form and the run it follows.

API names (what `gradio_client`'s view_api lists; docs/api.md):
- Public: an action a caller would script, named by a plain verb (api_name="start_training",
  "plan_split", "evaluate", "export_model", "send_npz", "compare_runs", ...), its function's
  parameters named as a caller types them (replicas, global_batch, ...), returning the page's
  answer and a gr.JSON of plain values.
- Internal: timer ticks, form restorers, browser-state keepers, pickers' fill-ins are off the API
  page: api_visibility="private"; the few a test drives as a page does (poll_run, poll_lists,
  on_load, devices_in_use) are "undocumented" under a name.
"""

from __future__ import annotations

import functools
import threading
from pathlib import Path

import gradio as gr

from distcore import jobs

from . import compare, evaluate, hosting, loss, setup, train, watch
from .format import error_md
from .settings import AppSettings, detect_devices, make_settings

hosting.patch_gradio()

STATIC = Path(__file__).resolve().parent / "static"
ABOUT_SOURCE = Path(__file__).resolve().parent.parent / "docs" / "tensorflow.md"
ABOUT_START, ABOUT_END = "<!-- about:start -->", "<!-- about:end -->"
TABS = ("setup", "train", "evaluate", "loss", "compare")


def static_text(name: str) -> str:
    """A file of webapp/static, as launch() takes it (css=, js=)."""
    return (STATIC / name).read_text(encoding="utf-8").strip()


def about_md(settings: AppSettings) -> str:
    """The About text: docs/tensorflow.md between its about markers (the docs and the app say the
    same, from one source)."""
    text = ABOUT_SOURCE.read_text(encoding="utf-8")
    start, end = text.find(ABOUT_START), text.find(ABOUT_END)
    if start < 0 or end < start:
        raise RuntimeError(f"{ABOUT_SOURCE} lacks its {ABOUT_START} ... {ABOUT_END} section")
    about = text[start + len(ABOUT_START) : end].strip()
    return f"\n{about}\n"


def header_md(settings: AppSettings) -> str:
    """The title and a one-line subtitle; the runs folder and job limit are docs (settings.md)."""
    devices = ", ".join(settings.gpus) if settings.gpus else "CPU only"
    note = f"\n\n{error_md(settings.device_note)}" if settings.device_note else ""
    subtitle = f"See what tf.distribute does with your batches · TensorFlow {settings.tensorflow} · {devices}"
    return f"# distcore\n{subtitle}{note}"


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
        with gr.Accordion("About: how to read this", open=False):
            gr.Markdown(about_md(settings))
        with gr.Tabs() as tabs:
            with gr.Tab("1 · Split", id=TABS[0]) as setup_tab:
                setup_ui = setup.build(settings, planner, bind)
            with gr.Tab("2 · Train", id=TABS[1]) as train_tab:
                train_ui = train.build(settings, lock, setup_ui, bind, timer)
            with gr.Tab("3 · Evaluate", id=TABS[2]) as evaluate_tab:
                evaluate_ui = evaluate.build(settings, bind, followed=train_ui["run"])
            with gr.Tab("4 · Loss scaling", id=TABS[3]) as loss_tab:
                loss.build(settings, bind)
            with gr.Tab("5 · Compare", id=TABS[4]) as compare_tab:
                compare.build(settings, bind, timer, compare_tab)
        setup.wire_split(demo, settings, planner, bind, setup_ui)
        keep_tab_in_browser(demo, tabs, [setup_tab, train_tab, evaluate_tab, loss_tab, compare_tab])
        # Plotly sizes a plot redrawn in a hidden tab at its default width; a resize event
        # after the tab shows makes it fill its panel again.
        train_tab.select(
            None,
            None,
            None,
            js="() => { setTimeout(() => window.dispatchEvent(new Event('resize')), 100); }",
            api_visibility="private",
        )
        lists = gr.State(None)  # per session: what the Evaluate tab's pickers show
        chosen = gr.State(None)  # per session: the run (and checkpoint) the user picked there
        evaluate_ui["run"].input(lambda name: [name, None], evaluate_ui["run"], chosen, api_visibility="private")
        evaluate_ui["checkpoint"].input(
            lambda name, ckpt: [name, ckpt],
            [evaluate_ui["run"], evaluate_ui["checkpoint"]],
            chosen,
            api_visibility="private",
        )
        timer.tick(
            bind(watch.poll_lists, settings),
            [train_ui["labels"], evaluate_ui["run"], evaluate_ui["checkpoint"], lists, chosen, train_ui["run"]],
            [train_ui["run"], train_ui["labels"], evaluate_ui["run"], evaluate_ui["checkpoint"], lists],
            show_progress="hidden",
            concurrency_limit=8,
            api_name="poll_lists",
            api_visibility="undocumented",
        )
        # Each browser keeps the run it follows, as it keeps its form and tab, so a reload (or the
        # page reloading itself after an app restart) follows that run, not another user's.
        followed = gr.BrowserState(None, storage_key="distcore-run", secret="distcore-run")
        train_ui["run"].change(
            lambda name: name, train_ui["run"], followed, show_progress="hidden", queue=False, api_visibility="private"
        )
        demo.load(
            bind(watch.on_load, settings),
            followed,
            [train_ui["run"], evaluate_ui["run"], evaluate_ui["checkpoint"]],
            api_name="on_load",
            api_visibility="undocumented",
        )
        keep = setup.keep_setup_in_browser(demo, setup_ui)
        # A form filled in from a run is kept too (.input events fire for typing only).
        train_ui["use_settings"].click(
            bind(train.load_run_settings, settings),
            train_ui["run"],
            [train_ui["message"], *setup.train_form(setup_ui)],
            api_visibility="private",
        ).then(**keep)
        for event in [*setup_ui["preset_events"], *setup_ui["data_events"], train_ui["demo_event"]]:
            event.then(**keep)
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
        tab.select(
            lambda chosen=tab_id: chosen, None, kept, show_progress="hidden", queue=False, api_visibility="private"
        )
    demo.load(
        lambda tab_id: gr.Tabs(selected=tab_id) if tab_id in TABS[1:] else gr.skip(),
        kept,
        tabs,
        show_progress="hidden",
        api_visibility="private",
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
        max_file_size=demo.settings.offer.max_upload_bytes,  # Gradio refuses a larger upload as it arrives
    )
