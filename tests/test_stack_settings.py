"""What `soco cluster start` records of its environment for every later `soco cluster restart`."""

from __future__ import annotations

import json

import pytest

from soco_pipeline.deploy.stack import LocalStack, recorded_settings

pytestmark = pytest.mark.unit


def test_only_soco_settings_without_credentials_are_recorded():
    environ = {
        "SOCO_CATEGORIES": "car,bus",
        "SOCO_PAUSE_AT": "features_written@x",
        "SOCO_HUB_TOKEN": "hf_secret",
        "SOCO_OPENAI_API_KEY": "sk-secret",
        "SOCO_DB_PASSWORD": "pw",
        "SOCO_RESULTS_URL": "postgresql://me:pw@db:5432/x",
        "SOCO_SPEC_URL": "https://example.org/specs",
        "AWS_SECRET_ACCESS_KEY": "aws-secret",
        "PATH": "/usr/bin",
    }
    assert recorded_settings(environ) == {
        "SOCO_CATEGORIES": "car,bus",
        "SOCO_PAUSE_AT": "features_written@x",
        "SOCO_SPEC_URL": "https://example.org/specs",
    }


def test_the_settings_survive_attach_and_reach_a_restarted_service(tmp_path, monkeypatch):
    """`restart` from a shell without the stack's settings still starts the service with them."""
    stack = LocalStack(tmp_path, start_env={"SOCO_CATEGORIES": "car,bus"})
    stack.ports = {"postgres": 5432, "redis": 6379, "s3": 8333}
    stack.save()
    assert "hf_secret" not in stack.state_file.read_text()
    assert json.loads(stack.state_file.read_text())["config"]["start_env"] == {"SOCO_CATEGORIES": "car,bus"}
    monkeypatch.setenv("SOCO_CATEGORIES", "chair")  # the restarting shell's own value loses
    attached = LocalStack.attach(tmp_path)
    assert attached.service_env()["SOCO_CATEGORIES"] == "car,bus"
