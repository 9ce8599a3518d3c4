"""The results page as one file (report/single_file.py): `soco report --single-file OUT.html` writes the page
with every image inlined as a base64 data URI, readable without its folder; the results_report asset writes
`<storage>/report.html` beside the folder; no file the page writes has a colon in its name. In Chromium
(when installed, as under .ci/run) the copy, moved away from its folder, shows every image."""

import base64
import io
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from PIL import Image

from soco_pipeline.report.page import build_report
from soco_pipeline.report.single_file import default_single_file, write_single_file
from tests.dagster_server import VENV_BIN
from tests.faults import child_env
from tests.needs import need
from tests.report_fixtures import write_storage

CHROMIUM = Path("/usr/bin/chromium")


class Images(HTMLParser):
    """The `src` of every <img> of a page."""

    def __init__(self):
        super().__init__()
        self.srcs: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.srcs.append(dict(attrs)["src"])


def image_sources(page: Path) -> list[str]:
    parser = Images()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser.srcs


@pytest.fixture
def storage(tmp_path):
    """The page fixture's storage, plus a panel whose file name holds a colon (a model name like `llava:7b`)."""
    settings, _ = write_storage(tmp_path / "storage")
    panels = tmp_path / "storage" / "report" / "panels" / "llava:7b"
    panels.mkdir(parents=True)
    Image.new("RGB", (64, 48), (10, 200, 30)).save(panels / "car_1-car_2__wheel:front.png")
    return settings


@pytest.mark.unit
def test_every_image_is_inlined_and_no_written_name_has_a_colon(storage, tmp_path):
    index = Path(build_report(storage, str(tmp_path / "page")))
    srcs = image_sources(index)
    assert any(s.startswith("panels/llava_7b/") for s in srcs)  # the copy's safe name
    single = write_single_file(index)
    assert single == tmp_path / "page.html" == default_single_file(index)  # beside the folder
    inlined = image_sources(single)
    assert len(inlined) == len(srcs) >= 4 and all(s.startswith("data:image/") for s in inlined)
    for src, original in zip(inlined, srcs, strict=True):  # the same pictures
        pic = Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1])))
        assert pic.size == Image.open(index.parent / original).size
    assert not [p for p in (tmp_path / "page").rglob("*") if ":" in p.name]
    with pytest.raises(ValueError, match="colon"):
        write_single_file(index, tmp_path / "results 12:00.html")


@pytest.mark.unit
def test_the_console_script_writes_the_single_file(storage, tmp_path):
    out = tmp_path / "mail" / "results.html"
    done = subprocess.run(
        [str(VENV_BIN / "soco"), "report", "--single-file", str(out)],
        env=child_env(SOCO_STORAGE=storage.storage_root, DAGSTER_HOME=str(tmp_path / "home")),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"wrote {out} (one file, its images inlined" in done.stdout
    srcs = image_sources(out)
    assert srcs and all(s.startswith("data:image/") for s in srcs)


@pytest.mark.stack
@pytest.mark.timeout(600)
def test_the_single_file_shows_every_image_in_chromium_without_its_folder(storage, tmp_path):
    need(CHROMIUM.exists(), "Debian's chromium")
    from playwright.sync_api import sync_playwright

    single = write_single_file(build_report(storage, str(tmp_path / "page")))
    away = tmp_path / "elsewhere" / "results.html"
    away.parent.mkdir()
    shutil.move(single, away)
    shutil.rmtree(tmp_path / "page")  # nothing left to load from
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=str(CHROMIUM),
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        try:
            tab = browser.new_page(viewport={"width": 1400, "height": 900})
            tab.goto(away.resolve().as_uri(), wait_until="load")
            loaded = tab.evaluate("Array.from(document.images).map(i => i.complete ? i.naturalWidth : 0)")
            assert len(loaded) >= 4 and all(w > 0 for w in loaded), loaded
        finally:
            browser.close()
