"""5 · Compare in Chromium: two runs written to the runs folder show as two named loss curves on
opening the tab; picking, smoothing, log scale and the x-axis redraw it; a refused rename
answers in place and the app keeps serving; Delete asks first. Screenshots go to
/tmp/distcore-screens/."""

import time

import pytest
from test_browser import page, server, shot  # noqa: F401 (fixtures)
from test_compare import write_run

pytestmark = pytest.mark.slow
LOSS = "#compare-loss .js-plotly-plot"


def traces(page):  # noqa: F811
    return page.evaluate(f"() => document.querySelector('{LOSS}').data.map(t => t.name)")


def layout(page, path):  # noqa: F811
    return page.evaluate(f"() => document.querySelector('{LOSS}').layout.{path}")


def wait_for(page, check, timeout=15):  # noqa: F811
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.25)
    raise AssertionError(f"not seen within {timeout} s: {traces(page)}")


def test_compare_tab_overlays_runs(server, page, tmp_path):  # noqa: F811
    runs = tmp_path / "runs"
    write_run(runs, "base-r1", replicas=1)
    write_run(runs, "wide-r2", replicas=2, batch=128)
    page.goto(server)
    page.get_by_role("tab", name="5 · Compare").click()
    page.wait_for_selector(LOSS, timeout=30000)
    wait_for(page, lambda: {"base-r1", "wide-r2"} <= set(traces(page)))  # no click beyond the tab
    assert len(traces(page)) == 4  # smoothed curves, each with its raw one faint behind it
    shot(page, tmp_path, "compare-open")

    smoothing = page.locator("#compare-smoothing input[type=number]")
    smoothing.fill("0")
    smoothing.press("Enter")
    wait_for(page, lambda: sorted(traces(page)) == ["base-r1", "wide-r2"])
    page.get_by_label("Log scale").check()
    wait_for(page, lambda: layout(page, "yaxis.type") == "log")
    page.get_by_role("radio", name="examples").check()
    wait_for(page, lambda: layout(page, "xaxis.title.text") == "examples seen")
    page.locator("#compare-runs").get_by_role("button", name="Remove").first.click()
    wait_for(page, lambda: len(traces(page)) == 1)
    shot(page, tmp_path, "compare-picked-log-examples")

    page.get_by_text("Rename, delete, notes").click()
    manage = page.locator("#compare-manage")
    manage.get_by_label("Run").click()
    page.get_by_role("option", name="base-r1").click()
    manage.get_by_label("New name").fill("../escape")
    manage.get_by_role("button", name="Rename", exact=True).click()
    page.wait_for_selector("#compare-manage .dc-error", timeout=10000)
    assert "not allowed" in page.locator("#compare-manage .dc-error").inner_text()
    manage.get_by_role("button", name="Delete", exact=True).click()
    page.get_by_text("Press Delete again").wait_for(timeout=10000)
    assert (runs / "base-r1").is_dir() and not (tmp_path / "escape").exists()
    page.reload()  # the app still serves
    page.get_by_role("tab", name="5 · Compare").click()
    page.wait_for_selector(LOSS, timeout=30000)
