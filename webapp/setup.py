"""1 · Split: the split explorer (devices, batch, dataset size, policy, input API, workers), redrawn
on every change; the training fields 2 · Train folds away; the form a browser keeps."""

from __future__ import annotations

import json

import gradio as gr

from distcore import explain, forms, jobs, plots
from distcore.config import (
    MAX_GLOBAL_BATCH,
    MAX_SEED,
    MAX_SPLIT_EXAMPLES,
    OPTIMIZERS,
    POLICIES,
    TRAIN_SIZE,
    DistcoreError,
    SplitConfig,
    check_int,
)

from . import choices
from .format import error_md
from .settings import AppSettings

POLICY_CHOICES = tuple((p.upper(), p) for p in POLICIES)
API_CHOICES = (("experimental_distribute_dataset", "dataset"), ("distribute_datasets_from_function", "function"))
TOY, FASHION = "toy", "fashion"
LIVE = ["dc-live"]  # answers a screen reader announces (static/app.js makes them live regions)

# The Setup fields a browser keeps across reloads and app restarts.
KEPT_FIELDS = (
    "count",
    "boxes",
    "batch",
    "policy",
    "api",
    "drop",
    "workers",
    "model",
    "optimizer",
    "lr",
    "seed",
    "epochs",
    "max_steps",
    "steps_per_loop",
    "ckpt_every",
    "ckpt_keep",
    "train_examples",
    "test_examples",
    "source",
    "toy_n",
    "files",
    "task",
    "data",
    "upload",
    "engine",
)


def device_inputs(settings: AppSettings, purpose: str = "", elem_id: str = "dc-devices", interactive=True):
    """GPU/CPU checkboxes when GPUs exist, else a choice of logical CPU device count."""
    has_gpus = bool(settings.gpus)
    boxes = gr.CheckboxGroup(
        choices=list(settings.gpus) + ["cpu:0"],
        value=list(settings.gpus),
        interactive=interactive,
        label=f"Devices{purpose} (GPUs first)",
        visible=has_gpus,
        elem_id=f"{elem_id}-boxes",
    )
    count = gr.Radio(
        choices=list(range(1, settings.max_logical_cpus + 1)),
        value=2,
        interactive=interactive,
        label=f"Replicas{purpose} (logical CPU devices)",
        visible=not has_gpus,
        elem_id=f"{elem_id}-count",
    )
    return count, boxes


def batch_note(settings: AppSettings, global_batch, cpu_count, gpu_boxes, workers=1) -> str:
    """The per-replica batch next to the global batch, or a one-line warning with its reasons folded."""
    try:
        headline, details = explain.batch_note_parts(settings.gpus, global_batch, cpu_count, gpu_boxes, workers)
    except DistcoreError as e:
        return error_md(e)
    return f"{headline}\n\n<details><summary>Why</summary>\n\n{details}\n\n</details>" if details else headline


def devices_in_use(workers):
    """The device inputs are ignored with 2+ worker processes (one CPU replica each): grey them out."""
    try:
        single = check_int("worker processes", workers, high=forms.MAX_WORKERS) == 1
    except DistcoreError:
        single = True
    info = None if single else "Not used with 2+ worker processes: each worker process has one CPU replica."
    return gr.update(interactive=single, info=info), gr.update(interactive=single)


def engine_shown(settings: AppSettings, workers):
    """The engine choice shows with 2+ worker processes, where Ray is installed (forms.engine_choices)."""
    try:
        several = check_int("worker processes", workers, high=forms.MAX_WORKERS) > 1
    except DistcoreError:
        several = False
    return gr.update(visible=several and settings.offer.ray)


# The distributed-input guide's three examples: (label, dataset size, global batch, replicas).
PRESETS = (
    ("6 ids · batch 4 · 2 replicas", 6, 4, 2),
    ("4 ids · batch 4 · 5 replicas", 4, 4, 5),
    ("8 ids · batch 4 · 3 replicas", 8, 4, 3),
)


def show_split(
    settings: AppSettings,
    planner,
    source,
    dataset_size,
    train_examples,
    global_batch,
    replicas,
    gpus,
    shard_policy,
    input_api,
    drop_remainder,
    source_files,
    workers=1,
    seed=0,
    data="fashion-mnist",
    upload=None,
):
    """Ask the planner how TF splits the dataset: (figure or None, notes markdown, the plan as
    plain values or {"error": message}). The training data's rows (`data`, `upload`: Train's data
    choice) are shown in the order epoch 1 of a run with `seed` reads them. The page's split and
    the API's /plan_split."""
    try:
        # At most the data's training rows (Fashion-MNIST's 60,000): the same check (and words) as Train's.
        rows = forms.data_rows(data, upload, settings.offer)[0] if source != TOY else TRAIN_SIZE
        examples = (
            check_int("N (toy dataset size)", dataset_size, high=MAX_SPLIT_EXAMPLES)
            if source == TOY
            else check_int("train examples", train_examples, high=rows)
        )
        global_batch = check_int("global batch size", global_batch, high=MAX_GLOBAL_BATCH)
        files = check_int("source files", source_files, low=0, high=64)
        workers = check_int("worker processes", workers, high=forms.MAX_WORKERS)
        shuffle_seed = (
            check_int("seed", seed if seed is not None else 0, low=0, high=MAX_SEED) if source == FASHION else None
        )
        if workers > 1:
            plan = split_on_workers(
                workers, examples, global_batch, shard_policy, input_api, drop_remainder, files, shuffle_seed, rows
            )
        else:
            names = forms.selected_devices(settings.gpus, replicas, gpus)
            cfg = SplitConfig(
                examples=examples,
                global_batch=global_batch,
                devices=names,
                policy=shard_policy,
                api=input_api,
                drop_remainder=bool(drop_remainder),
                files=files or 0,
                shuffle_seed=shuffle_seed,
                rows=rows,
            )
            if planner.max_replicas and cfg.replicas > planner.max_replicas:
                raise DistcoreError(f"the split planner handles at most {planner.max_replicas} replicas.")
            plan = planner.plan(forms.planner_request(cfg))
            plan = {**plan, "devices": list(names)}  # show the user's device names on the columns
    except DistcoreError as e:
        return None, error_md(e), {"error": str(e)}
    headline, details = explain.split_notes(plan)
    notes = f"{headline}\n\n<details><summary>Details</summary>\n\n{details}\n\n</details>" if details else headline
    shown = {k: plan[k] for k in ("global_batch", "replicas", "devices", "steps", "rows") if k in plan}
    return plots.split_figure(plan), notes, {"headline": headline, **shown}


def split_on_workers(
    workers, examples, global_batch, policy, api, drop_remainder, files, shuffle_seed=None, rows=TRAIN_SIZE
) -> dict:
    """The plan as W real worker processes see it (10-20 s: each one starts TensorFlow)."""
    cfg = SplitConfig(
        examples=examples,
        global_batch=global_batch,
        devices=("cpu:0",),
        policy=policy,
        api=api,
        drop_remainder=bool(drop_remainder),
        files=files or 0,
        workers=workers,
        shuffle_seed=shuffle_seed,
        rows=rows,
    )
    return plots.combine_worker_plans(jobs.run_cli_json(forms.split_args(cfg), timeout=300))


def keep_setup_in_browser(demo: gr.Blocks, setup: dict) -> dict:
    """Each browser keeps its Setup form in its own localStorage (gr.BrowserState), so a
    reload, or the page reloading itself after an app restart, does not quietly put the
    defaults back under the next Start. The values are settings, not secrets: a fixed key
    lets them outlive a restart (BrowserState's default key is new at every start). Returns the
    keeping event's arguments, for other events that fill in the form."""
    fields = [setup[k] for k in KEPT_FIELDS]
    kept = gr.BrowserState({}, storage_key="distcore-setup", secret="distcore-setup-form")
    # Kept in the browser, not on the server: replies to one event per keystroke can land out of
    # order and keep a value typed before the last one.
    keep = dict(
        fn=None,
        inputs=fields,
        outputs=kept,
        show_progress="hidden",
        queue=False,
        js=f"(...values) => Object.fromEntries({json.dumps(KEPT_FIELDS)}.map((k, i) => [k, values[i]]))",
    )
    gr.on([f.input for f in fields], **keep)
    demo.load(
        form_restorer(dict(zip(KEPT_FIELDS, fields))), kept, fields, show_progress="hidden", api_visibility="private"
    )
    return keep


def form_restorer(fields: dict):
    """A function from the kept values to the fields' updates: a value this app would not
    offer (another machine's device count, a choice since removed) keeps the default."""

    def fits(field, value) -> bool:
        if isinstance(field, gr.Checkbox):
            return isinstance(value, bool)
        if isinstance(field, gr.Textbox):
            return value is None or isinstance(value, str)
        if isinstance(value, bool):  # True is an int to Python, not a device count or a rate
            return False
        if isinstance(field, gr.CheckboxGroup):
            return isinstance(value, list) and all(v in allowed(field) for v in value)
        if isinstance(field, gr.Radio):
            return isinstance(value, (str, int)) and value in allowed(field)
        return value is None or isinstance(value, (int, float))

    def allowed(field) -> list:
        return [v for _, v in field.choices]

    def restore(kept) -> list:
        kept = kept if isinstance(kept, dict) else {}
        return [kept[k] if k in kept and fits(fields[k], kept[k]) else gr.skip() for k in fields]

    return restore


def train_form(setup: dict) -> list:
    """The Setup fields training reads, in forms.TRAIN_FORM order."""
    return [setup[k] for k, _ in forms.TRAIN_FORM]


def training_fields(ui: dict, settings: AppSettings) -> None:
    """The training settings (2 · Train's fold), added to `ui`: the form a browser keeps spans
    both tabs, and training reads tab 1's devices, batch, policy, input API and workers too."""
    offer = settings.offer
    with gr.Row(equal_height=True):
        ui["task"] = gr.Radio(forms.task_choices(offer), value="classifier", label="Task", scale=1)
        ui["data"] = gr.Radio(forms.data_choices(offer), value="fashion-mnist", label="Data", scale=1)
        ui["npz"] = gr.File(
            label=f"Your .npz: x_train, y_train, x_test, y_test (≤ {offer.max_upload_bytes >> 20} MB)",
            file_types=[".npz"],
            type="filepath",
            height=110,
            visible=False,
            scale=2,
            elem_id="dc-npz",
        )
    ui["upload"] = gr.Textbox("", visible=False, label="Upload id")  # the kept upload's id (forms.store_upload)
    ui["data_note"] = gr.Markdown(elem_classes=LIVE, elem_id="dc-data-note")
    ui["upload_answer"] = gr.JSON(visible=False, label="Upload")
    with gr.Row():
        ui["model"] = gr.Radio(forms.model_choices(offer), value="cnn", label="Model")
        ui["optimizer"] = gr.Radio(list(OPTIMIZERS), value="adam", label="Optimizer")
        ui["lr"] = gr.Number(value=0.001, label="Learning rate")
        ui["seed"] = gr.Number(value=0, label="Seed")
    with gr.Row():
        ui["epochs"] = gr.Number(value=1, label="Epochs")
        ui["max_steps"] = gr.Number(value=0, label="Max steps (0 = no limit)")
        ui["steps_per_loop"] = gr.Number(value=20, label="Steps per loop")
        ui["ckpt_every"] = gr.Number(value=0, label="Checkpoint every N steps", info="0 = at epoch ends and on stop")
    with gr.Row():
        ui["ckpt_keep"] = gr.Number(value=0, label="Checkpoints kept", info="the newest N; 0 = all")
        ui["train_examples"] = gr.Number(value=60000, label="Training examples", info="the first N of 60,000")
        ui["test_examples"] = gr.Number(value=10000, label="Test examples", info="the first N of 10,000")
    choices.wire_data(settings, ui)


SPLIT_INPUTS = ("source", "toy_n", "train_examples", "batch", "count", "boxes", "policy", "api", "drop", "files")
SPLIT_EXTRA = ("workers", "seed", "data", "upload")  # show_split's parameters after SPLIT_INPUTS


def build(settings: AppSettings, planner, bind) -> dict:
    """The split explorer's layout; its events are wired by wire_split once 2 · Train has added
    the training fields (the split of the training data's rows reads Data, Training examples and Seed)."""
    ui = {}
    gr.Markdown("Which examples does each replica get? Change a value: TensorFlow redraws the split.")
    with gr.Row():
        ui["presets"] = [gr.Button(label, size="sm", scale=0) for label, *_ in PRESETS]
    with gr.Row():
        with gr.Column(scale=3):
            # No label: the figure's title says what it shows, and Gradio's label would cover its start.
            ui["split_plot"] = gr.Plot(label="Global batches × replicas", show_label=False, elem_id="dc-split")
            ui["split_text"] = gr.Markdown(elem_classes=LIVE, elem_id="dc-split-notes")
            ui["split_json"] = gr.JSON(visible=False, label="Plan")
        with gr.Column(scale=2, min_width=320):
            ui["count"], ui["boxes"] = device_inputs(settings)
            with gr.Row():
                ui["batch"] = gr.Number(value=64, label="Global batch size", min_width=120)
                ui["toy_n"] = gr.Number(value=150, label="N (toy dataset size)", min_width=120)
            ui["batch_note"] = gr.Markdown(batch_note(settings, 64, 2, list(settings.gpus)))
            ui["policy"] = gr.Radio(list(POLICY_CHOICES), value="auto", label="Shard policy")
            ui["api"] = gr.Radio(list(API_CHOICES), value="dataset", label="Input API")
            with gr.Row():
                ui["drop"] = gr.Checkbox(value=False, label="drop_remainder")
                ui["workers"] = gr.Number(value=1, label="Worker processes", min_width=120)
            # How Start training starts 2+ worker processes; a split on workers always runs them locally.
            ui["engine"] = gr.Radio(
                forms.engine_choices(settings.offer),
                value="local",
                label="Engine",
                info="how 2 · Train starts the worker processes",
                visible=False,
                elem_id="dc-engine",
            )
            with gr.Accordion("Data rows, source files", open=False):
                ui["source"] = gr.Radio(
                    [("Toy ids 0 … N-1", TOY), ("Training data rows (2 · Train's Data), in epoch 1's order", FASHION)],
                    value=TOY,
                    label="Dataset to split",
                )
                ui["files"] = gr.Number(value=0, label="Source files (0 = in memory)", info="FILE sharding needs files")
    note_inputs = [ui["batch"], ui["count"], ui["boxes"], ui["workers"]]
    for comp in note_inputs:
        comp.change(
            bind(batch_note, settings),
            note_inputs,
            ui["batch_note"],
            show_progress="hidden",
            queue=False,
            api_visibility="private",
        )
    ui["workers"].change(
        bind(engine_shown, settings),
        ui["workers"],
        ui["engine"],
        show_progress="hidden",
        queue=False,
        api_visibility="private",
    )
    ui["workers"].change(
        devices_in_use,
        ui["workers"],
        [ui["count"], ui["boxes"]],
        show_progress="hidden",
        queue=False,
        api_name="devices_in_use",
        api_visibility="undocumented",
    )
    # The shell chains keeping the form to each (.input events fire for typing only).
    ui["preset_events"] = [
        button.click(
            lambda n=n, g=g, r=r: (TOY, n, g, r, 1),
            None,
            [ui["source"], ui["toy_n"], ui["batch"], ui["count"], ui["workers"]],
            show_progress="hidden",
            api_visibility="private",
        )
        for button, (_, n, g, r) in zip(ui["presets"], PRESETS)
    ]
    return ui


def wire_split(demo: gr.Blocks, settings: AppSettings, planner, bind, ui: dict) -> None:
    """The split redraws on its own: on opening (for the form the browser kept) and on every
    change, the last change winning while a plan is drawn (trigger_mode="always_last")."""
    inputs = [ui[k] for k in (*SPLIT_INPUTS, *SPLIT_EXTRA)]
    outputs = [ui["split_plot"], ui["split_text"], ui["split_json"]]
    gr.on(
        [ui[k].change for k in (*SPLIT_INPUTS, "workers", "data", "upload")],
        bind(show_split, settings, planner),
        inputs,
        outputs,
        concurrency_limit=4,
        trigger_mode="always_last",
        show_progress="minimal",
        api_name="plan_split",
        api_description="How tf.distribute cuts the dataset: the figure, its notes, and the plan as JSON.",
    )
    demo.load(bind(show_split, settings, planner), inputs, outputs, show_progress="hidden", api_visibility="private")
