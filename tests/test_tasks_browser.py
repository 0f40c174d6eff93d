"""Tasks and data from the page, in Chromium: a refused .npz upload says why in place and keeps
nothing, a good one fills the examples with its rows; then the GAN, picked on 2 · Train (its model
fields go, a note says which data it trains on), trains a tiny run whose d_loss and g_loss share one
plot beside its newest image grid; 3 · Evaluate shows the grid of its checkpoint, not a confusion
matrix, and exports its generator as a .keras file. Screenshots go to /tmp/distcore-screens/."""

import re
import time

import numpy as np
import pytest
from playwright.sync_api import expect, sync_playwright
from test_browser import CHROMIUM_ARGS, open_training_settings, server, shot  # noqa: F401 (fixtures)

pytestmark = pytest.mark.slow

STEP_PLOT = """() => {
    for (const el of document.querySelectorAll('#dc-loss-plot .js-plotly-plot')) {
        return (el.data || []).filter(t => t.name !== 'checkpoint').map(t => [t.name, (t.x || []).length]);
    }
    return [];
}"""
# Each plot in the row of the grid: how far its drawing reaches past its box's right edge, in px.
OVERFLOW = """() => ['#dc-loss-plot', '#dc-epoch-plot'].map(id => {
    const box = document.querySelector(id).getBoundingClientRect();
    const svg = document.querySelector(id + ' .main-svg').getBoundingClientRect();
    return Math.round(svg.right - box.right);
})"""


@pytest.fixture
def page():
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        yield page
        browser.close()


def uploads(runs):
    """Every file under the runs folder (a refused upload adds none)."""
    return sorted(str(p.relative_to(runs)) for p in runs.rglob("*") if p.is_file()) if runs.exists() else []


def test_a_gan_trains_from_the_page_and_evaluates_to_its_image_grid(server, page, tmp_path):  # noqa: F811
    runs = tmp_path / "runs"
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (300, 28, 28), dtype=np.uint8)
    np.savez(tmp_path / "bad.npz", x_train=images, y_train=-np.ones(300, int), x_test=images[:50], y_test=np.zeros(50))
    np.savez(
        tmp_path / "digits.npz",
        x_train=images,
        y_train=np.arange(300) % 3,
        x_test=images[:50],
        y_test=np.arange(50) % 3,
    )
    page.goto(server)
    page.get_by_role("tab", name="2 · Train").click()
    open_training_settings(page)

    # An upload: refused with the reason in place and nothing kept; then a good one, summed up.
    page.get_by_role("radio", name="Your .npz").check()
    # A user drops the file on the widget once it shows.
    expect(page.locator("#dc-npz")).to_be_visible()
    drop = page.locator("#dc-npz input[type=file]")
    before = uploads(runs)
    drop.set_input_files(str(tmp_path / "bad.npz"))
    refusal = page.locator("#dc-data-note .dc-error")
    expect(refusal).to_contain_text("y_train in bad.npz holds -1", timeout=30_000)
    page.wait_for_timeout(1500)  # the events its reply sets off have run: the reason stays
    expect(refusal).to_contain_text("y_train in bad.npz holds -1")
    assert uploads(runs) == before
    drop.set_input_files(str(tmp_path / "digits.npz"))
    expect(page.locator("#dc-data-note")).to_contain_text("digits.npz: 300 + 50 rows of 28×28, 3 classes")
    expect(page.get_by_label("Training examples", exact=True)).to_have_value("300")
    expect(page.get_by_label("Test examples", exact=True)).to_have_value("50")
    assert len(list((runs / ".uploads").glob("*.npz"))) == 1
    shot(page, tmp_path, "tasks-1-upload")
    # Another file replaces a kept one after the box is cleared; refused, its reason stays too.
    page.locator("#dc-npz").get_by_role("button", name="Clear").click()
    expect(page.locator("#dc-data-note")).not_to_contain_text("digits.npz")
    drop.set_input_files(str(tmp_path / "bad.npz"))
    expect(refusal).to_contain_text("y_train in bad.npz holds -1", timeout=30_000)
    page.wait_for_timeout(1500)
    expect(refusal).to_contain_text("y_train in bad.npz holds -1")

    # The GAN: no model, optimizer or learning rate; it trains on the built-in data, and says which.
    page.get_by_role("radio", name="Fashion-MNIST").check()
    page.get_by_role("radio", name="GAN").check()
    expect(page.get_by_text("The GAN trains on Fashion-MNIST")).to_be_visible(timeout=10_000)
    expect(page.get_by_role("radio", name="MLP")).to_be_hidden()
    expect(page.get_by_label("Learning rate")).to_be_hidden()
    for label, value in (
        ("Training examples", "256"),
        ("Test examples", "256"),
        ("Epochs", "3"),
        ("Max steps (0 = no limit)", "10"),
        ("Steps per loop", "5"),
        ("Checkpoint every N steps", "5"),
    ):
        page.get_by_label(label, exact=True).fill(value)
        page.get_by_label(label, exact=True).press("Tab")
    expect(page.get_by_text(re.compile(r"^Training: GAN · 3 epochs \(10 steps"))).to_be_visible(timeout=10_000)
    page.get_by_label("New run name").fill("gan-run")
    page.get_by_role("button", name="Start training").click()
    expect(page.get_by_text(re.compile("Started gan-run"))).to_be_visible(timeout=30_000)

    # Both losses on the step plot, the image grid beside it, redrawn by the page's polling.
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        traces = dict(page.evaluate(STEP_PLOT))
        if traces.get("d_loss", 0) >= 10 and traces.get("g_loss", 0) >= 10:
            break
        page.wait_for_timeout(500)
    assert traces.get("d_loss", 0) >= 10 and traces.get("g_loss", 0) >= 10, traces
    expect(page.get_by_text(re.compile(r"gan-run · finished · step 10 / 10"))).to_be_visible(timeout=120_000)
    grid = page.locator("#dc-grid img")
    expect(grid).to_be_visible(timeout=30_000)
    expect(page.locator("#dc-grid")).to_contain_text("Generated images, step 10")
    assert grid.evaluate("img => img.naturalWidth") >= 200  # 8×8 images of 28 px and borders, twice as large
    # The plots narrow to the room the grid leaves them, whenever it appears: none is cut off at
    # its right edge, also when the grid comes back after the plots were drawn without it.
    page.wait_for_timeout(1000)
    assert max(page.evaluate(OVERFLOW)) <= 1, page.evaluate(OVERFLOW)
    hide = "() => { document.querySelector('#dc-grid').style.display = 'none'; }"
    page.evaluate(hide)
    page.evaluate("() => window.dispatchEvent(new Event('resize'))")
    page.wait_for_timeout(1000)
    assert max(page.evaluate(OVERFLOW)) <= 1  # drawn as wide as the row without the grid
    page.evaluate("() => { document.querySelector('#dc-grid').style.display = ''; }")
    page.wait_for_timeout(1000)
    assert max(page.evaluate(OVERFLOW)) <= 1, page.evaluate(OVERFLOW)
    expect(page.get_by_text(re.compile("^Setup: GAN"))).to_be_visible()
    shot(page, tmp_path, "tasks-2-gan-trained")

    # Evaluate: the checkpoint's grid and its losses, no confusion matrix; its generator exported.
    page.get_by_role("tab", name="3 · Evaluate").click()
    expect(page.get_by_role("combobox", name="Run", exact=True)).to_have_value(re.compile("^gan-run"), timeout=30_000)
    expect(page.get_by_role("combobox", name="Checkpoint", exact=True)).to_have_value("ckpt-10", timeout=30_000)
    page.get_by_role("button", name="Evaluate checkpoint").click()
    expect(page.get_by_text(re.compile(r"^d_loss \d\.\d{4} · g_loss \d\.\d{4}$"))).to_be_visible(timeout=180_000)
    expect(page.locator("#dc-eval-grid img")).to_be_visible(timeout=30_000)
    expect(page.get_by_label("Confusion matrix")).to_be_hidden()
    table = page.locator("#dc-evaluations")
    expect(table).to_contain_text("d_loss")
    expect(table).to_contain_text("ckpt-10")
    page.get_by_role("button", name="Export model (.keras)").click()
    expect(page.get_by_text(re.compile("ckpt-10: its generator as a Keras file"))).to_be_visible(timeout=180_000)
    expect(page.get_by_role("cell", name="gan-run-ckpt-10.keras")).to_be_visible()
    link = page.locator("a[href*='gan-run-ckpt-10.keras']").first.get_attribute("href")
    assert page.request.get(link).body()[:2] == b"PK"  # a .keras file is a zip archive
    shot(page, tmp_path, "tasks-3-gan-evaluated")
