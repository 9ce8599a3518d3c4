"""What `make demo` and `soco run` skip: a stage is fresh when Dagster's versions say nothing it reads or runs
moved since its last materialization, under the same settings (`soco/settings` run tag). The demo's LVLM
block (cli/demo_lvlm.py) asks the same, so this sits below both."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import dagster as dg

from soco_pipeline.defs.shared.automation import DATA_VERSION_TAG

BACKBONES, LVLMS = "backbones", "lvlms"  # the dynamic partition sets of specs


def observe_sources(instance: dg.DagsterInstance, soco) -> None:
    """Record the protocol's and spec files' data versions where they moved."""
    from soco_pipeline.backbones.spec_files import spec_data_version, spec_problem
    from soco_pipeline.defs.shared.automation import observation
    from soco_pipeline.lvlm.specs import scan_specs as scan_lvlms

    current = {("evaluation_protocol", None): soco.protocol().version_hash()}
    backbones = Path(soco.backbones_dir)
    for name in instance.get_dynamic_partitions(BACKBONES):
        if (backbones / f"{name}.yaml").is_file():
            current["backbone_spec", name] = spec_data_version(backbones / f"{name}.yaml")
    known = set(instance.get_dynamic_partitions(LVLMS))
    current.update(
        {("lvlm_spec", n): v for n, v in scan_lvlms(Path(soco.lvlms_dir))[0].items() if n in known}
    )
    for (source, partition), version in current.items():
        seen = observed_version(instance, source, partition)
        # a backbone spec is checked against the world (its model built on the meta device: seconds for a
        # timm spec) only when its version moved; an invalid one is not observed (its sensor reports it)
        if seen != version and (
            source != "backbone_spec" or spec_problem(backbones / f"{partition}.yaml") is None
        ):
            instance.report_runless_asset_event(observation(source, version, partition))


def observed_version(instance: dg.DagsterInstance, source: str, partition: str | None) -> str | None:
    """The data version of the last observation of source asset `source` (of `partition`), or None."""
    records = instance.fetch_observations(
        dg.AssetRecordsFilter(
            asset_key=dg.AssetKey(source), asset_partitions=[partition] if partition else None
        ),
        limit=1,
    ).records
    return records[0].event_log_entry.asset_observation.tags.get(DATA_VERSION_TAG) if records else None


def spec_accepted(instance: dg.DagsterInstance, path: Path) -> bool:
    """Whether the backbone spec at `path` is, in its data version, the one `observe_sources` last recorded
    for its name: a spec it checked against the world then (an invalid one is never observed)."""
    from soco_pipeline.backbones.spec_files import spec_data_version

    seen = observed_version(instance, "backbone_spec", path.stem)
    return seen is not None and seen == spec_data_version(path)


LIMIT_TAG = "soco/limit"  # `soco run --limit N`'s runs: SOCO's pairs per category (a partial run)
SETTINGS_TAG = "soco/settings"  # on every demo and `soco run` run: settings_fingerprint of its code location


def settings_fingerprint(defs: dg.Definitions) -> str:
    """A hash of what a run reads that Dagster does not version (settings, configs, protocol)."""
    import hashlib
    import json

    from soco_pipeline.tasks import family_specs

    soco = defs.resources.get("soco")
    if soco is None:  # a code location without the project's settings (the toy family's tests)
        return "none"
    settings = soco.settings()
    files = {}
    for name in family_specs():
        path = Path(settings.family_config_path(name))
        files[name] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "missing"
    payload = {
        "settings": soco.model_dump(mode="json"),
        "configs": files,
        "protocol": soco.protocol().version_hash(),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


CODE_VERSION_TAG = "dagster/code_version"  # the tags Dagster writes on every materialization and observation


class Freshness:
    """Whether Dagster's code and input data versions call assets fresh (public records only)."""

    def __init__(self, defs: dg.Definitions, instance: dg.DagsterInstance):
        self.defs, self.instance = defs, instance
        self.specs = {spec.key: spec for spec in defs.resolve_all_asset_specs()}
        self.fingerprint = settings_fingerprint(defs)
        # `latest`'s answers during one `fresh` call (no run happens inside one); None outside one
        self.memo: dict | None = None

    def latest(
        self, key: dg.AssetKey, partition: str | None, observed: bool = True, before: int | None = None
    ) -> dg.EventLogRecord | None:
        """The newest materialization (or observation) of `key` (of `partition`), before `before`."""
        if self.memo is None:
            return self._fetch_latest(key, partition, observed, before)
        args = (key, partition, observed, before)
        if args not in self.memo:
            self.memo[args] = self._fetch_latest(*args)
        return self.memo[args]

    def _fetch_latest(
        self, key: dg.AssetKey, partition: str | None, observed: bool, before: int | None
    ) -> dg.EventLogRecord | None:
        spec = self.specs.get(key)
        parts = [partition] if partition is not None and spec is not None and spec.partitions_def else None
        where = dg.AssetRecordsFilter(asset_key=key, asset_partitions=parts, before_storage_id=before)
        records = [*self.instance.fetch_materializations(where, limit=1).records]
        if observed:
            records += self.instance.fetch_observations(where, limit=1).records
        return max(records, key=lambda r: r.storage_id, default=None)

    def version(self, key: dg.AssetKey, partition: str | None, before: int | None = None) -> str | None:
        """The data version of `key` (of `partition`) now, or as it was before event `before`."""
        record = self.latest(key, partition)
        if before is not None and record is not None and record.storage_id >= before:
            record = self.latest(key, partition, before=before)  # else the newest event is the one before
        event = None if record is None else record.asset_materialization or record.asset_observation
        return None if event is None else (event.tags or {}).get(DATA_VERSION_TAG)

    def stale(self, key: dg.AssetKey, partition: str | None) -> bool:
        """Whether `key` is missing, of another code version, or older than an input's version."""
        made = self.latest(key, partition, observed=False)
        if made is None:
            return True
        spec, tags = self.specs[key], made.asset_materialization.tags or {}
        if spec.code_version is not None and tags.get(CODE_VERSION_TAG) != spec.code_version:
            return True
        for dep in spec.deps:
            upstream = self.specs.get(dep.asset_key)
            partitioned = upstream is not None and bool(upstream.partitions_def)
            if partitioned and (partition is None or upstream.partitions_def != spec.partitions_def):
                where = dg.AssetRecordsFilter(asset_key=dep.asset_key, after_storage_id=made.storage_id)
                if self.instance.fetch_materializations(where, limit=1).records:
                    return True
                continue
            part = partition if partitioned else None
            if self.version(dep.asset_key, part, before=made.storage_id) != self.version(dep.asset_key, part):
                return True
        return False

    def fresh(
        self, keys: Sequence[dg.AssetKey], partition: str | None = None, limit: str | None = "none"
    ) -> bool:
        """Whether every asset of `keys` is fresh, by today's fingerprint (and `limit` tag)."""
        self.memo = {}
        try:
            return self._fresh(keys, partition, limit)
        finally:
            self.memo = None

    def _fresh(self, keys: Sequence[dg.AssetKey], partition: str | None, limit: str | None) -> bool:
        if any(self.stale(k, partition) for k in keys):
            return False
        for key in keys:
            made = self.latest(key, partition, observed=False)
            run = self.instance.get_run_by_id(made.run_id)
            if run is None or run.tags.get(SETTINGS_TAG) != self.fingerprint:
                return False
            if partition is not None and limit is not None and run.tags.get(LIMIT_TAG, "none") != limit:
                return False
        return True
