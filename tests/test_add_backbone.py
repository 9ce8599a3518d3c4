"""`soco add-backbone` refuses a spec whose weights are missing or whose model is unknown or not a ViT."""

import re

import pytest
import yaml

from soco_pipeline.cli import soco as cli
from soco_pipeline.storage import PROJECT_ROOT

pytestmark = pytest.mark.unit

BASE = yaml.safe_load((PROJECT_ROOT / "assets" / "backbones" / "vit_small_random.yaml").read_text())


@pytest.fixture
def dest(tmp_path, monkeypatch):
    folder = tmp_path / "backbones"
    folder.mkdir()
    monkeypatch.setenv("SOCO_BACKBONES_DIR", str(folder))
    return folder


def _add(tmp_path, capsys, name: str, **fields) -> tuple[int, str]:
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(yaml.safe_dump({**BASE, **fields}))
    rc = cli.main(["add-backbone", str(spec)])
    return rc, capsys.readouterr().err


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"weights": "/nonexistent/dinov2_vits14.pth"},
            r"weights file /nonexistent/dinov2_vits14.pth does not exist",
        ),
        ({"weights": "hf:nobody-here/not-a-model"}, r"'nobody-here/not-a-model' is not in the local cache"),
        (
            {"model": "vit_smal_patch14_dinov2"},
            r"timm has no model 'vit_smal_patch14_dinov2' \(did you mean vit_small_patch14_dinov2",
        ),
        ({"model": "resnet18"}, r"timm model 'resnet18' is not a ViT-style network.*kind 'packaged'"),
        ({"model": "convnext_tiny"}, r"'convnext_tiny' is not a ViT-style network"),
        ({"layer": 40}, r"layer 40 out of range for 'vit_small_patch14_dinov2''s 12 blocks"),
    ],
)
def test_a_bad_spec_is_refused_and_nothing_is_added(tmp_path, capsys, dest, fields, message):
    rc, err = _add(tmp_path, capsys, "bad", **fields)
    assert rc == 2 and err.startswith("error: backbone 'bad'")
    assert re.search(message, err), err
    assert list(dest.iterdir()) == []


def test_a_good_spec_with_a_local_weights_file_is_added(tmp_path, capsys, dest):
    weights = tmp_path / "vit_s.pth"
    weights.write_bytes(b"checkpoint")  # its content is checked when the model loads, not at add time
    rc, _ = _add(tmp_path, capsys, "vit_s_local", weights=str(weights))
    assert rc == 0 and (dest / "vit_s_local.yaml").exists()
    rc, _ = _add(tmp_path, capsys, "vit_random")  # weights: none
    assert rc == 0 and (dest / "vit_random.yaml").exists()
