"""A bad spec copied into assets/backbones/ under `make ui` fails the sensor's tick with the file and the reason
(the UI shows a failed tick's message), after the tick that adds the valid specs; it never holds them back."""

import shutil

import dagster as dg
import pytest

from soco_pipeline.defs.definitions import build_definitions
from soco_pipeline.defs.shared.automation import InvalidSpecError
from soco_pipeline.storage import PROJECT_ROOT

pytestmark = pytest.mark.unit


def test_a_bad_spec_fails_the_tick_with_its_reason(tmp_path):
    specs = tmp_path / "backbones"
    specs.mkdir()
    shutil.copy(PROJECT_ROOT / "assets" / "backbones" / "vit_small_random.yaml", specs)
    (specs / "typo_spec.yaml").write_text("kind: timmm\nmodel: vit_small_patch16_224\n")
    defs = build_definitions(storage_root=str(tmp_path / "storage"), backbones_dir=str(specs))
    sensor = defs.get_sensor_def("backbone_specs_sensor")
    with dg.DagsterInstance.ephemeral() as instance:

        def tick(cursor=None):
            ctx = dg.build_sensor_context(
                instance=instance, definitions=defs, cursor=cursor, resources={"soco": defs.resources["soco"]}
            )
            return sensor(ctx)

        first = tick()  # the valid spec is added although a bad one sits beside it
        assert [r.partition_keys for r in first.dynamic_partitions_requests] == [["vit_small_random"]]
        instance.add_dynamic_partitions("backbones", ["vit_small_random"])
        with pytest.raises(InvalidSpecError) as failed:
            tick(first.cursor)
        message = str(failed.value)
        assert f"1 backbone spec(s) in {specs} invalid, not added: typo_spec.yaml: " in message
        assert "timmm" in message and "Fix or remove the file" in message
        (specs / "typo_spec.yaml").unlink()  # fixed: the next tick passes again
        assert not tick(first.cursor).run_requests
