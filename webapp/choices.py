"""The training form's task, data and model choices: which fields a task reads, the data's rows
and note, and an uploaded .npz checked and kept (distcore.forms decides; this module wires it)."""

from __future__ import annotations

import functools

import gradio as gr

from distcore import forms
from distcore.config import DistcoreError

from .format import error_md, plain_text
from .settings import AppSettings


def task_fields(task):
    """The fields a task reads: the model only the classifier's; optimizer and learning rate all
    but the GAN's (it trains the guide's two models with their own Adam optimizers)."""
    return gr.update(visible=task == "classifier"), *[gr.update(visible=task != "gan")] * 2


def task_chosen(settings: AppSettings, task, data, upload):
    """Choosing the GAN picks its data (MNIST where this machine has it) and all its rows;
    other choices keep the data."""
    if task != "gan" or data == forms.UPLOAD or data == forms.gan_data(settings.offer):
        return gr.skip(), gr.skip(), gr.skip()
    data = forms.gan_data(settings.offer)
    return data, *forms.data_rows(data, None, settings.offer)


def data_shown(settings: AppSettings, task, data, upload, answer=None):
    """The upload box (shown for "Your .npz"), the note under the data choice, and the examples
    fields' hints, for the data chosen. `answer` is the last upload's (upload_data's): with no
    file kept, the note says why the last one was refused, since a refusal empties the id and
    that change runs this after the refusal's own note."""
    try:
        rows = forms.data_rows(data, upload, settings.offer)
    except DistcoreError:
        rows = None
    hint = [gr.update(info=f"the first N of {n:,}") for n in rows] if rows else [gr.skip(), gr.skip()]
    try:
        note = forms.data_note(task, data, upload, settings.offer)
    except DistcoreError as e:
        note = error_md(e)
    if not note and data == forms.UPLOAD and not upload and isinstance(answer, dict) and answer.get("ok") is False:
        note = error_md(answer.get("message", ""))
    return gr.update(visible=data == forms.UPLOAD), note, *hint


def data_chosen(settings: AppSettings, data, upload):
    """A data choice takes all its rows, training and test (the examples fields)."""
    try:
        return forms.data_rows(data, upload, settings.offer)
    except DistcoreError:
        return gr.skip(), gr.skip()


def upload_data(settings: AppSettings, file):
    """An .npz dropped on the upload box, and the API's /send_npz: checked, then kept in the
    runs folder's .uploads (forms.store_upload). Returns (note, its id, the data choice, training
    and test examples (all its rows), the answer as plain values, the upload box). A refused file
    writes nothing: the note says why, and the box is emptied."""
    try:
        if not file:
            raise DistcoreError("no file was sent: upload an .npz with x_train, y_train, x_test, y_test.")
        record = forms.store_upload(file, settings.offer)
    except DistcoreError as e:
        return error_md(e), "", gr.skip(), gr.skip(), gr.skip(), {"ok": False, "message": str(e)}, None
    return (
        forms.upload_line(record),
        record["upload"],
        forms.UPLOAD,
        record["train_rows"],
        record["test_rows"],
        {"ok": True, "message": plain_text(forms.upload_line(record)), **record},
        gr.skip(),
    )


def wire_data(settings: AppSettings, ui: dict) -> None:
    """The task and data choices' events; those that fill in fields are in ui["data_events"], for
    the shell to keep the form after them."""
    private = {"show_progress": "hidden", "api_visibility": "private"}
    ui["task"].change(task_fields, ui["task"], [ui["model"], ui["optimizer"], ui["lr"]], queue=False, **private)
    examples = [ui["train_examples"], ui["test_examples"]]
    shown = [ui["npz"], ui["data_note"], *examples]
    choice = [ui["task"], ui["data"], ui["upload"]]
    gr.on(
        [ui["data"].change, ui["upload"].change, ui["task"].change],
        functools.partial(data_shown, settings),
        [*choice, ui["upload_answer"]],
        shown,
        **private,
    )
    ui["data_events"] = [
        ui["task"].input(functools.partial(task_chosen, settings), choice, [ui["data"], *examples], **private),
        ui["data"].input(functools.partial(data_chosen, settings), choice[1:], examples, **private),
        ui["npz"].upload(
            functools.partial(upload_data, settings),
            ui["npz"],
            [ui["data_note"], ui["upload"], ui["data"], *examples, ui["upload_answer"], ui["npz"]],
            show_progress="minimal",
            api_name="send_npz",
            api_description="Check an .npz (x_train, y_train, x_test, y_test) and keep it; start_training takes "
            "its id as upload, with data npz.",
        ),
    ]
    ui["npz"].clear(lambda: ("", ""), None, [ui["upload"], ui["data_note"]], **private)
