"""1 · Setup & split: the devices, batch and model; Show split; the form a browser keeps."""

from __future__ import annotations

import json

import gradio as gr

from distcore import explain, forms, jobs, plots
from distcore.config import (
    MAX_GLOBAL_BATCH,
    MAX_SEED,
    MAX_SPLIT_EXAMPLES,
    MODELS,
    OPTIMIZERS,
    POLICIES,
    TRAIN_SIZE,
    DistcoreError,
    SplitConfig,
    check_int,
)

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
        label=f"Logical CPU devices{purpose} (= replicas)",
        info="No GPU here: the CPU is split into this many logical devices, one replica each.",
        visible=not has_gpus,
        elem_id=f"{elem_id}-count",
    )
    return count, boxes


def batch_note(settings: AppSettings, global_batch, cpu_count, gpu_boxes, workers=1) -> str:
    """The per-replica batch next to the global batch, or a plain warning."""
    try:
        return explain.batch_note(settings.gpus, global_batch, cpu_count, gpu_boxes, workers)
    except DistcoreError as e:
        return error_md(e)


def devices_in_use(workers):
    """The device inputs are ignored with 2+ worker processes (one CPU replica each): grey them out."""
    try:
        single = check_int("worker processes", workers, high=forms.MAX_WORKERS) == 1
    except DistcoreError:
        single = True
    info = (
        "No GPU here: the CPU is split into this many logical devices, one replica each."
        if single
        else "Not used with 2+ worker processes: each worker process has one CPU replica."
    )
    return gr.update(interactive=single, info=info), gr.update(interactive=single)


def show_split(
    settings: AppSettings,
    planner,
    source,
    toy_examples,
    train_examples,
    global_batch,
    cpu_count,
    gpu_boxes,
    policy,
    api,
    drop_remainder,
    files,
    workers=1,
    seed=0,
):
    """Ask the planner how TF splits the dataset; return (figure or None, summary markdown).
    Fashion-MNIST's rows are shown in the order epoch 1 of a run with `seed` reads them."""
    try:
        # Fashion-MNIST has 60,000 training examples: the same check (and words) as Train's.
        examples = (
            check_int("N (toy dataset size)", toy_examples, high=MAX_SPLIT_EXAMPLES)
            if source == TOY
            else check_int("train examples", train_examples, high=TRAIN_SIZE)
        )
        global_batch = check_int("global batch size", global_batch, high=MAX_GLOBAL_BATCH)
        files = check_int("source files", files, low=0, high=64)
        workers = check_int("worker processes", workers, high=forms.MAX_WORKERS)
        shuffle_seed = (
            check_int("seed", seed if seed is not None else 0, low=0, high=MAX_SEED) if source == FASHION else None
        )
        if workers > 1:
            return split_on_workers(workers, examples, global_batch, policy, api, drop_remainder, files, shuffle_seed)
        names = forms.selected_devices(settings.gpus, cpu_count, gpu_boxes)
        cfg = SplitConfig(
            examples=examples,
            global_batch=global_batch,
            devices=names,
            policy=policy,
            api=api,
            drop_remainder=bool(drop_remainder),
            files=files or 0,
            shuffle_seed=shuffle_seed,
        )
        if planner.max_replicas and cfg.replicas > planner.max_replicas:
            raise DistcoreError(f"the split planner handles at most {planner.max_replicas} replicas.")
        plan = planner.plan(forms.planner_request(cfg))
    except DistcoreError as e:
        return None, error_md(e)
    plan = {**plan, "devices": list(names)}  # show the user's device names on the columns
    return plots.split_figure(plan), plots.split_summary(plan)


def split_on_workers(workers, examples, global_batch, policy, api, drop_remainder, files, shuffle_seed=None):
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
    )
    result = jobs.run_cli_json(forms.split_args(cfg), timeout=300)
    plan = plots.combine_worker_plans(result)
    return plots.split_figure(plan), plots.split_summary(plan)


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
    demo.load(form_restorer(dict(zip(KEPT_FIELDS, fields))), kept, fields, show_progress="hidden")
    return keep


def form_restorer(fields: dict):
    """A function from the kept values to the fields' updates: a value this app would not
    offer (another machine's device count, a choice since removed) keeps the default."""

    def fits(field, value) -> bool:
        if isinstance(field, gr.Checkbox):
            return isinstance(value, bool)
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


def build(settings: AppSettings, planner, bind) -> dict:
    """The tab's layout and events; returns its components by name."""
    ui = {}
    gr.Markdown(
        "Choose the devices, the batch and the model. **Show split** asks TensorFlow "
        "which examples each replica gets; **2 · Train** uses these settings."
    )
    with gr.Row():
        with gr.Column():
            gr.Markdown("### Devices and input")
            ui["count"], ui["boxes"] = device_inputs(settings)
            ui["batch"] = gr.Number(value=64, label="Global batch size", info="examples per step, over all replicas")
            ui["batch_note"] = gr.Markdown(batch_note(settings, 64, 2, list(settings.gpus)))
            ui["policy"] = gr.Radio(list(POLICY_CHOICES), value="auto", label="Shard policy (auto_shard_policy)")
            ui["api"] = gr.Radio(list(API_CHOICES), value="dataset", label="Input API")
            ui["drop"] = gr.Checkbox(value=False, label="drop_remainder (drop the last partial global batch)")
            ui["workers"] = gr.Number(
                value=1,
                label="Worker processes",
                info="1: MirroredStrategy in one process. 2+: MultiWorkerMirroredStrategy over that many "
                "processes, one CPU replica each (TF_CONFIG names 127.0.0.1, but TensorFlow's servers "
                "listen on all interfaces, unauthenticated: see the README); Show split then takes "
                "10-20 s (every worker process starts TensorFlow)",
            )
        with gr.Column():
            gr.Markdown("### Model and training")
            with gr.Row():
                ui["model"] = gr.Radio(list(MODELS), value="cnn", label="Model")
                ui["optimizer"] = gr.Radio(list(OPTIMIZERS), value="adam", label="Optimizer")
            with gr.Row():
                ui["lr"] = gr.Number(value=0.001, label="Learning rate")
                ui["seed"] = gr.Number(value=0, label="Seed")
            with gr.Row():
                ui["epochs"] = gr.Number(value=1, label="Epochs")
                ui["max_steps"] = gr.Number(value=0, label="Max steps (0 = no limit)")
            with gr.Row():
                ui["steps_per_loop"] = gr.Number(
                    value=20, label="Steps per loop", info="steps run inside one tf.function call"
                )
                ui["ckpt_every"] = gr.Number(
                    value=0, label="Checkpoint every N steps", info="0 = at epoch ends and on stop"
                )
                ui["ckpt_keep"] = gr.Number(
                    value=0, label="Checkpoints kept", info="the newest N stay on disk; 0 = all"
                )
            with gr.Row():
                ui["train_examples"] = gr.Number(value=60000, label="Training examples", info="the first N of 60,000")
                ui["test_examples"] = gr.Number(value=10000, label="Test examples", info="the first N of 10,000")
    gr.Markdown("### The split: who gets which examples")
    with gr.Row():
        ui["source"] = gr.Radio(
            [
                ("Toy dataset of N ids (0 … N-1)", TOY),
                ("Fashion-MNIST training rows, in the order epoch 1 reads them (Seed)", FASHION),
            ],
            value=TOY,
            label="Dataset to split",
            scale=2,
        )
        ui["toy_n"] = gr.Number(value=150, label="N (toy dataset size)", scale=1)
        ui["files"] = gr.Number(
            value=0, label="Source files (0 = in memory)", info="FILE sharding needs files", scale=1
        )
    show = gr.Button("Show split", variant="primary")
    # No label: the figure's title says what it shows, and Gradio's label would cover its start.
    ui["split_plot"] = gr.Plot(label="Global batches × replicas", show_label=False, elem_id="dc-split")
    ui["split_text"] = gr.Markdown(elem_classes=LIVE)
    note_inputs = [ui["batch"], ui["count"], ui["boxes"], ui["workers"]]
    for comp in note_inputs:
        comp.change(bind(batch_note, settings), note_inputs, ui["batch_note"], show_progress="hidden", queue=False)
    ui["workers"].change(devices_in_use, ui["workers"], [ui["count"], ui["boxes"]], show_progress="hidden", queue=False)
    show.click(
        bind(show_split, settings, planner),
        [
            ui["source"],
            ui["toy_n"],
            ui["train_examples"],
            ui["batch"],
            ui["count"],
            ui["boxes"],
            ui["policy"],
            ui["api"],
            ui["drop"],
            ui["files"],
            ui["workers"],
            ui["seed"],
        ],
        [ui["split_plot"], ui["split_text"]],
        concurrency_limit=4,
        api_name="show_split",
    )
    return ui
