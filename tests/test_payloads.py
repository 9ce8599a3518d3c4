"""The payload contracts without a cluster: every registered payload resolves to a `(inputs, log)` function,
the family configs the training payloads receive travel as JSON unchanged, inputs and extra tables make the
round trip through the job folder and the Pipes report, and the tables' checksum is content-addressed.
(tests/test_slurm.py runs the payloads as Slurm jobs; the family pipeline tests run them in-process.)"""

from __future__ import annotations

import inspect

import pandas as pd
import pytest

from soco_pipeline.deploy.payload_jobs import read_report
from soco_pipeline.payloads import PAYLOADS, frame_checksum
from soco_pipeline.payloads.registry import run_payload
from soco_pipeline.payloads.run import extra_path
from soco_pipeline.payloads.transfer import read_inputs, write_inputs
from soco_pipeline.storage import TableIntegrityError, write_parquet_atomic
from tests.tiny_families import write_tiny_family_configs

pytestmark = pytest.mark.unit


def test_every_payload_resolves_to_a_function_of_inputs_and_log():
    import importlib

    assert {"features", "global_features", "fgbmk_probe", "tpips_heads"} <= set(PAYLOADS)
    for name, target in PAYLOADS.items():
        module, func = target.split(":")
        fn = getattr(importlib.import_module(module), func)
        assert list(inspect.signature(fn).parameters) == ["inputs", "log"], name


def test_a_payload_missing_an_input_names_it():
    with pytest.raises(KeyError, match="backbone"):
        run_payload("fgbmk_probe", {}, print)


@pytest.mark.parametrize("family", ["fgbmk", "tpips"])
def test_family_configs_travel_as_json_unchanged(tmp_path, family):
    """The training payloads receive their family's config as JSON (`config`): the shipped config and the
    tests' tiny one are equal to themselves after the round trip."""
    if family == "fgbmk":
        from soco_pipeline.tasks.fgbmk.config import FgbmkConfig as Model
        from soco_pipeline.tasks.fgbmk.config import load_config
    else:
        from soco_pipeline.tasks.tpips.config import TpipsConfig as Model
        from soco_pipeline.tasks.tpips.config import load_config
    tiny = write_tiny_family_configs(tmp_path)[f"{family}_config_path"]
    for cfg in (load_config(), load_config(tiny)):
        assert Model.model_validate_json(cfg.model_dump_json()) == cfg


def test_inputs_round_trip_through_the_job_folder(tmp_path):
    items = pd.DataFrame({"image_id": ["a", "b"], "split": ["train", "test"], "simulated": [True, True]})
    path = write_inputs(tmp_path / "inputs", {"items": items, "backbone": "vit", "config": '{"seed": 1}'})
    back = read_inputs(path)
    pd.testing.assert_frame_equal(back["items"], items, check_exact=True)
    assert (back["backbone"], back["config"]) == ("vit", '{"seed": 1}')


def test_extra_tables_come_back_with_the_report(tmp_path):
    """What run.py writes for a payload of several tables (its table at `output`, each extra beside it) and
    reports through Pipes is what the launcher hands the asset; an altered extra table is refused."""
    output = str(tmp_path / "output.parquet")
    table = pd.DataFrame({"level": ["class", "subclass"], "top1": [50.0, 25.0]})
    extra = {"fgbmk_probe_predictions": pd.DataFrame({"image_id": ["x"], "correct": [True]})}
    write_parquet_atomic(table, output)
    paths = {k: extra_path(output, k) for k in extra}
    assert paths == {"fgbmk_probe_predictions": str(tmp_path / "output.fgbmk_probe_predictions.parquet")}
    for k, p in paths.items():
        write_parquet_atomic(extra[k], p)
    meta = {"rows": 2, "checksum": frame_checksum(table, *extra.values())}
    got = read_report([{"output": output, "extra": paths, "metadata": meta}], "job 1")
    pd.testing.assert_frame_equal(got.table, table, check_exact=True)
    pd.testing.assert_frame_equal(got.extra["fgbmk_probe_predictions"], extra["fgbmk_probe_predictions"])
    assert got.metadata == meta and meta["checksum"] == frame_checksum(got.table, *got.extra.values())
    with open(paths["fgbmk_probe_predictions"], "r+b") as f:  # a byte of the data changed after the write
        f.seek(8)
        byte = f.read(1)
        f.seek(8)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(TableIntegrityError, match="output.fgbmk_probe_predictions.parquet"):
        read_report([{"output": output, "extra": paths, "metadata": meta}], "job 1")
    with pytest.raises(RuntimeError, match="job 1 completed without reporting its result through Pipes"):
        read_report([], "job 1")


def test_frame_checksum_follows_the_content():
    a = pd.DataFrame({"level": ["class", "subclass"], "top1": [50.0, 25.0]})
    b = pd.DataFrame({"image_id": ["x"], "correct": [True]})
    same = frame_checksum(a.copy(), b.copy())
    assert frame_checksum(a, b) == same
    assert frame_checksum(a.set_axis([5, 6]), b) == same  # the index is not content
    assert frame_checksum(a.assign(top1=[50.0, 25.000001]), b) != same
    assert frame_checksum(a.rename(columns={"top1": "top5"}), b) != same
    assert frame_checksum(b, a) != same
