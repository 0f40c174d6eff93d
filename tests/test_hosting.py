"""webapp.hosting: the Gradio patches hold for the pinned Gradio, and the UI imports no TensorFlow.

A Gradio upgrade fails these tests on purpose: each patch is written for one version and one
shape of the function it wraps, so an upgrade re-examines every patch (keep it, change it, or drop
it when Gradio fixes the bug itself), then moves GRADIO_VERSION and the shapes below.
"""

import inspect
import subprocess
import sys

import gradio as gr
from gradio.blocks import Blocks
from gradio.state_holder import SessionState

from conftest import ROOT
from webapp import hosting

hosting.patch_gradio()


def test_the_patches_are_for_the_installed_gradio():
    assert gr.__version__ == hosting.GRADIO_VERSION
    pinned = [line for line in (ROOT / "requirements.txt").read_text().splitlines() if line.startswith("gradio==")]
    assert pinned == [f"gradio=={hosting.GRADIO_VERSION}"]
    assert hosting.patched_shapes() == {
        "Radio.preprocess": "(self, payload: 'str | int | float | None') -> 'str | int | float | None'",
        "SessionState.__setitem__": "(self, key: 'int', value: 'Any')",
    }
    # The session patch answers Blocks.preprocess_data filing a rebuilt copy under its own id.
    assert "block._id not in state" in inspect.getsource(Blocks.preprocess_data)


def test_a_radio_of_numbers_takes_them_as_text():
    radio = gr.Radio(choices=[1, 2, 3], value=2)
    assert radio.preprocess("3") == 3 and radio.preprocess(3) == 3
    words = gr.Radio(choices=["1", "b"], value="b")
    assert words.preprocess("1") == "1"  # a Radio of text keeps text
    hosting.patch_gradio()  # a second time changes nothing
    assert gr.Radio.preprocess.wrapped.__qualname__ == "Radio.preprocess"


def test_a_sessions_copy_of_a_component_keeps_the_id_it_stands_for():
    with gr.Blocks() as demo:
        box = gr.Textbox()
    state = SessionState(demo)
    copy = gr.Textbox()
    assert copy._id != box._id
    state[box._id] = copy
    assert copy._id == box._id and state[box._id] is copy
    assert SessionState.__setitem__.wrapped.__qualname__ == "SessionState.__setitem__"


def test_the_ui_package_imports_no_tensorflow(tmp_path):
    code = (
        "import sys, importlib, pkgutil, webapp\n"
        "for m in pkgutil.iter_modules(webapp.__path__): importlib.import_module('webapp.' + m.name)\n"
        "from webapp.shell import build_app\n"
        "build_app(runs_root=sys.argv[1], devices_info={'gpus': []})\n"
        "assert 'tensorflow' not in sys.modules, 'tensorflow was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=ROOT, check=True, timeout=120)


def test_no_ui_module_is_long():
    for path in (ROOT / "webapp").glob("*.py"):
        assert len(path.read_text().splitlines()) <= 400, path
    assert len((ROOT / "app.py").read_text().splitlines()) <= 150
