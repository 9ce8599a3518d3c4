"""A damaged earlier snapshot must not fool the regression watch (issue 58): a damaged scores Parquet or a
truncated JSON of an earlier snapshot makes the watch "not comparable" (a failed check at WARN severity, never
"no regression"), naming the file and advice that works: `soco drop-snapshot` (moves it aside, nothing deleted;
the watch then compares with the snapshot before it) or archiving that data version again."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import dagster as dg
import numpy as np
import pytest

from soco_pipeline.defs.shared.watch import watch_events
from soco_pipeline.trust import history
from tests.faults import child_env
from tests.test_family_watch import N_CASES, archive

pytestmark = pytest.mark.unit

GOOD = np.arange(2 * N_CASES + 1) % 4 != 0  # 75% right
BAD = np.zeros(2 * N_CASES + 1, bool)  # the degraded run: 0%


def three_versions(root: str) -> Path:
    """v0 and v1 good, v2 degraded (a 75-point drop); the archive folder."""
    archive(root, "v0", GOOD, 0)
    archive(root, "v1", GOOD, 1)
    archive(root, "v2", BAD, 2)
    return Path(history.archive_dir(root, "mmvm", "m"))


def check(outcome: history.WatchOutcome) -> dg.AssetCheckResult:
    events = watch_events("mmvm_history", outcome, "v2")
    (result,) = [e for e in events if isinstance(e, dg.AssetCheckResult) and e.check_name == "no_regression"]
    return result


def drop(root: str, version: str, family: str = "mmvm") -> subprocess.CompletedProcess:
    """`soco drop-snapshot FAMILY m VERSION` through the console script, in a fresh process."""
    return subprocess.run(
        [str(Path(sys.executable).parent / "soco"), "drop-snapshot", family, "m", version],
        capture_output=True,
        text=True,
        timeout=120,
        env=child_env(SOCO_STORAGE=root),
    )


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_the_intact_archive_fails_the_watch_on_the_drop(tmp_path):
    three_versions(str(tmp_path))
    out = history.watch(str(tmp_path), "mmvm", "m", "v2", reduction="pooled")
    assert out.previous == "v1" and "75.0 -> 0.0" in out.message and not out.not_comparable
    assert not check(out).passed and check(out).severity == dg.AssetCheckSeverity.ERROR


@pytest.mark.parametrize(
    "damage", ["truncated json", "json without a field", "truncated parquet", "flipped parquet byte"]
)
def test_a_damaged_earlier_snapshot_is_not_comparable_named_and_dropped_by_the_named_command(
    tmp_path, damage
):
    root = str(tmp_path)
    folder = three_versions(root)
    if damage == "truncated json":
        (folder / "v1.json").write_bytes((folder / "v1.json").read_bytes()[:40])
    elif damage == "json without a field":
        (folder / "v1.json").write_text('{"model": "m"}')
    elif damage == "truncated parquet":
        (folder / "v1.parquet").write_bytes((folder / "v1.parquet").read_bytes()[:300])
    else:
        data = bytearray((folder / "v1.parquet").read_bytes())
        data[64] ^= 0xFF  # one flipped byte in the first column chunk (the values)
        (folder / "v1.parquet").write_bytes(bytes(data))
    given = files(folder)
    out = history.watch(root, "mmvm", "m", "v2", reduction="pooled")
    assert out.message == "" and out.previous == "" and out.not_comparable.startswith("not comparable: ")
    named = folder / ("v1.parquet" if "parquet" in damage else "v1.json")
    assert str(named) in out.not_comparable
    assert "`soco drop-snapshot mmvm m v1`" in out.not_comparable
    assert "re-materialize mmvm_history for m, which archives that snapshot again" in out.not_comparable
    assert "re-materialize the asset that writes it" not in out.not_comparable  # the advice that did nothing
    result = check(out)
    assert not result.passed and result.severity == dg.AssetCheckSeverity.WARN  # missing evidence: a warning
    assert result.metadata["compared_with"].value == "not comparable"
    assert result.metadata["not_comparable"].value == out.not_comparable
    assert out.figures["accuracy/zero_shot"] == "0.0"  # the value, no comparison pretended
    assert set(out.table["data_version"]) <= {"v0", "v1", "v2"} and files(folder) == given  # nothing touched

    done = drop(root, "v1")  # the named command
    assert done.returncode == 0, done.stderr
    assert f"moved {folder}/dropped/v1.json" in done.stdout
    assert files(folder / "dropped") == {k.removeprefix("dropped/"): v for k, v in given.items() if "v1" in k}
    after = history.watch(root, "mmvm", "m", "v2", reduction="pooled")
    assert after.previous == "v0" and not after.not_comparable  # compared with the snapshot before it
    assert "regressed from data version v0 to v2: accuracy/zero_shot 75.0 -> 0.0" in after.message
    assert not check(after).passed and check(after).severity == dg.AssetCheckSeverity.ERROR


def test_archiving_the_damaged_data_version_again_repairs_the_watch(tmp_path):
    folder = three_versions(str(tmp_path))
    (folder / "v1.parquet").write_bytes(b"PAR1 not really")
    assert history.watch(str(tmp_path), "mmvm", "m", "v2", reduction="pooled").not_comparable
    archive(str(tmp_path), "v1", GOOD, 1)  # the old spec restored and its history re-materialized
    out = history.watch(str(tmp_path), "mmvm", "m", "v2", reduction="pooled")
    assert out.previous == "v1" and "75.0 -> 0.0" in out.message and not out.not_comparable


def test_drop_snapshot_of_an_unknown_version_names_the_snapshots_there(tmp_path):
    three_versions(str(tmp_path))
    done = drop(str(tmp_path), "v9")
    assert done.returncode == 2 and "no snapshot of data version 'v9'" in done.stderr
    assert "its snapshots: v0, v1, v2" in done.stderr


def test_drop_snapshot_of_an_unknown_family_names_the_watched_ones(tmp_path):
    three_versions(str(tmp_path))
    before = files(tmp_path)
    done = drop(str(tmp_path), "v1", family="mvmm")
    assert done.returncode == 2 and "no regression watch of a family named 'mvmm'" in done.stderr
    assert "mmvm" in done.stderr.split("the watched families:")[1] and files(tmp_path) == before
