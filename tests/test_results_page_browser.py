"""The results page in headless Chromium at 1,400 px: the sections and captions are there, no table runs off
the page (a wide table scrolls inside its own box), every image loads, and the screenshot is kept for a
person to look at (under the test's temporary folder)."""

from pathlib import Path

import pytest

from soco_pipeline.report.page import build_report
from tests.needs import need
from tests.report_fixtures import write_storage

pytestmark = [pytest.mark.stack, pytest.mark.timeout(600)]

CHROMIUM = Path("/usr/bin/chromium")
WIDTH = 1400


def test_the_page_reads_at_1400_px(tmp_path):
    need(CHROMIUM.exists(), "Debian's chromium")
    from playwright.sync_api import sync_playwright

    settings, _ = write_storage(tmp_path / "storage")
    index = Path(build_report(settings))
    shot = tmp_path / "screenshots" / "results_page.png"
    shot.parent.mkdir()
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=str(CHROMIUM),
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        try:
            tab = browser.new_page(viewport={"width": WIDTH, "height": 900})
            tab.goto(index.resolve().as_uri(), wait_until="load")
            tab.screenshot(path=str(shot), full_page=True)
            for section in (
                "summary",
                "backbones",
                "lvlm",
                "mmvm",
                "fgbmk",
                "tpips",
                "correlation",
                "panels",
            ):
                assert tab.locator(f"section#{section} h2").is_visible(), section
            assert tab.locator("#simulated").inner_text().startswith("Simulated:")
            captions = tab.locator("figcaption").all_inner_texts()
            assert any("published by OmniProbe" in c for c in captions), captions
            assert any(c.startswith("pair car_1-car_2, query keypoint") for c in captions), captions
            # the page itself never scrolls sideways; a table wider than its box scrolls inside it
            assert tab.evaluate("document.documentElement.scrollWidth") <= WIDTH
            boxes = tab.evaluate(
                """Array.from(document.querySelectorAll('table')).map(t => {
                     const box = t.closest('.scroll'); const r = box.getBoundingClientRect();
                     return {right: r.right, scrolls: getComputedStyle(box).overflowX,
                             wider: t.scrollWidth > box.clientWidth, visible: t.offsetParent !== null};
                   })"""
            )
            assert len(boxes) >= 12
            for box in boxes:
                assert box["scrolls"] == "auto"
                if box["visible"]:
                    assert box["right"] <= WIDTH, box
            # the MMVM board (30 columns) is wider than the page: it scrolls in its box
            tab.locator("section#mmvm details summary").click()
            assert tab.evaluate(
                "(() => { const t = document.querySelector('section#mmvm details table');"
                " return t.scrollWidth > t.closest('.scroll').clientWidth; })()"
            )
            # headline rows are one line tall (the data source is a note, not a cell of every row)
            heights = tab.evaluate(
                "Array.from(document.querySelectorAll('section#mmvm > .scroll tbody tr'))"
                ".map(r => r.getBoundingClientRect().height)"
            )
            assert heights and max(heights) < 40, heights
            loaded = tab.evaluate("Array.from(document.images).map(i => i.complete ? i.naturalWidth : 0)")
            assert loaded and all(w > 0 for w in loaded), loaded
        finally:
            browser.close()
    assert shot.stat().st_size > 10_000
