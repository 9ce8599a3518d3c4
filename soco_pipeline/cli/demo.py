"""`make demo`: run the whole pipeline on the embedded data set and print the leaderboards.

Every stage runs in a Dagster run launched through the instance at $DAGSTER_HOME (`dg.execute_job` of the
code location's asset job on Dagster's in-process executor, behind defs/recovery's dead-run check: its
steps one after the other in the demo's own process), so `make ui` afterwards shows every asset
materialized. The runs: data and pairs once; every task family's items (below) in one; per backbone
partition (one per spec file in assets/backbones/) SOCO's rows and every family's in one; then every board
with the leaderboard, the DuckDB results file, the correlation table and the results page in one
(cli/joined_runs.py). A stage that fails stops only itself (a family whose items failed, its family): the
others and the leaderboards still run, and the demo names what failed and why (exit status 1).

A task family is an asset group `<family>` with an asset `<family>_leaderboard`, found in the
Definitions (no list to edit): its unpartitioned assets run once, its `backbones`-partitioned assets per
backbone, its `lvlms`-partitioned ones per LVLM spec, then its leaderboard with its other summaries (the
unpartitioned assets over partitioned ones), printed after SOCO's with those summaries' `summary` metadata.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg
import pandas as pd

from soco_pipeline.cli.freshness import BACKBONES, LVLMS, SETTINGS_TAG, Freshness, observe_sources
from soco_pipeline.defs.definitions import build_definitions
from soco_pipeline.defs.recovery import pool_is_full, process_tags
from soco_pipeline.settings import variable

DATA_AND_PAIRS = ("data", "pairs")
PER_BACKBONE = (
    "feature_manifest",
    "global_feature_manifest",
    "predictions",
    "four_choice_predictions",
    "metrics",
    "global_metrics",
    "results_record",
    "model_history",  # the regression watch of the SOCO scores, as each family runs its <family>_history
    "published_gap",  # a spec with `reference:`: the gap to the published figure, knob by knob
)
SUMMARY = (
    "leaderboard",
    "published_comparison",  # the view docs/results.md queries (ours beside the published figures)
    "protocol_atlas",  # how far the ranking moves under each single-knob change
    "model_headlines",
    "model_summary",
    "results_database",
    "correlation",
    "results_report",
)
LVLM_GROUP = "lvlm"  # SOCO's LVLM family: the demo's LVLM block runs it with the loopback answerers
# Where each run's job comes from: module and function, called with the demo's settings overrides (tests
# point it at their own module).
LOCATION = ("soco_pipeline.cli.demo", "demo_job")
LOGGERS = {"console": {"config": {"log_level": "WARNING"}}}


# Every step in the launching process, one after the other: no step process to start (0.5 s each) and no two
# torch steps sharing the cores (docs/benchmarks.md, "One run per model").
RUN_CONFIG = {"execution": {"config": {"in_process": {}}}, "loggers": LOGGERS}
# A stage that would wait for a pool slot another run holds runs on the multiprocess executor instead: its
# loop stops on Ctrl-C while it waits, the in-process one only between steps (tests/test_crash_recovery.py).
WAITING_RUN_CONFIG = {"execution": {"config": {"multiprocess": {}}}, "loggers": LOGGERS}


# The jobs built during one `Runner.run` (None outside one): Dagster loads a run's job from its pointer about
# four times in the launching process (the run's creation, its plan, its executor), each a build of the
# definitions (80 ms); within one run nothing they read can change, so they are built once.
_RUN_JOBS: dict | None = None


@contextmanager
def one_build_per_run() -> Iterator[None]:
    """Within the block, `demo_job` builds each job once and returns that job again (one run's launch)."""
    global _RUN_JOBS
    _RUN_JOBS = {}
    try:
        yield
    finally:
        _RUN_JOBS = None


def demo_job(name: str, keys: list[str], overrides: dict | None = None) -> dg.JobDefinition:
    """An asset job `name` over `keys` (and their checks) in the code location built with the demo's
    settings `overrides`: what one demo run executes."""
    if _RUN_JOBS is None:
        return build_demo_job(name, keys, overrides)
    memo = (name, tuple(keys), repr(sorted((overrides or {}).items())))
    if memo not in _RUN_JOBS:
        _RUN_JOBS[memo] = build_demo_job(name, keys, overrides)
    return _RUN_JOBS[memo]


def build_demo_job(name: str, keys: list[str], overrides: dict | None = None) -> dg.JobDefinition:
    """`demo_job`'s job, built now."""
    job = dg.define_asset_job(
        name, selection=dg.AssetSelection.assets(*[dg.AssetKey.from_user_string(k) for k in keys])
    )
    from soco_pipeline.cli.run_console import soco_console  # Dagster's console lines less its notes

    mine = dg.Definitions(jobs=[job], loggers={"console": soco_console})
    defs = dg.Definitions.merge(build_definitions(**(overrides or {})), mine)
    return defs.resolve_job_def(name)


@dataclass
class Stage:
    """One run: a label for the console, its job's name, the assets it materializes, its partition (or None)."""

    label: str
    job: str
    keys: list[dg.AssetKey]
    partition: str | None = None
    ops: dict = field(default_factory=dict)  # run config of its ops (e.g. `soco run --limit`)
    tags: dict = field(default_factory=dict)  # extra run tags


@dataclass
class Family:
    """A task family's assets: unpartitioned, per backbone, per LVLM, its leaderboard and the other summaries
    over partitioned assets (run with the leaderboard)."""

    name: str
    once: list[dg.AssetKey] = field(default_factory=list)
    per_backbone: list[dg.AssetKey] = field(default_factory=list)
    per_lvlm: list[dg.AssetKey] = field(default_factory=list)
    leaderboard: dg.AssetKey | None = None
    after: list[dg.AssetKey] = field(
        default_factory=list
    )  # unpartitioned, over partitioned ones: with the board


def families(defs: dg.Definitions, exclude: Sequence[str] = ()) -> list[Family]:
    """Every asset group `<g>` that has an asset `<g>_leaderboard`, by name, with its assets sorted by how
    they are partitioned. Assets of other partitionings are left out (the demo cannot choose their keys)."""
    graph = defs.resolve_asset_graph()
    groups: dict[str, list] = {}
    for key in graph.get_all_asset_keys():
        node = graph.get(key)
        if node.is_materializable:
            groups.setdefault(node.group_name, []).append(node)
    found = []
    for name in sorted(groups):
        board = dg.AssetKey(f"{name}_leaderboard")
        if name in exclude or board not in {n.key for n in groups[name]}:
            continue
        family = Family(name, leaderboard=board)
        for node in sorted(groups[name], key=lambda n: n.key.to_user_string()):
            parts = node.partitions_def
            part_name = getattr(parts, "name", None)
            if node.key == board:
                continue
            if parts is None and any(
                graph.get(p).partitions_def is not None for p in node.parent_keys if graph.has(p)
            ):
                family.after.append(node.key)
            elif parts is None:
                family.once.append(node.key)
            elif part_name == BACKBONES:
                family.per_backbone.append(node.key)
            elif part_name == LVLMS:
                family.per_lvlm.append(node.key)
        found.append(family)
    return found


class DemoSettingError(ValueError):
    """A demo setting (an environment variable of the demo) that names something that is not there; its message says the fix."""


def demo_families(available: Sequence[str]) -> list[str]:
    """The task families the demo runs: $SOCO_DEMO_FAMILIES (comma-separated group names, or `none`), by
    default every one of `available`. An unknown name is an error that lists the families there are."""
    value = variable("SOCO_DEMO_FAMILIES").strip()
    if not value:
        return list(available)
    if value == "none":
        return []
    names = [n.strip() for n in value.split(",") if n.strip()]
    unknown = sorted(set(names) - set(available))
    if unknown:
        raise DemoSettingError(
            f"SOCO_DEMO_FAMILIES names {', '.join(unknown)}, which is no task family here; use a comma-separated "
            f"list of {', '.join(available)}, or `none` (unset: every family)"
        )
    return [n for n in available if n in names]


def family_stages(family: Family, backbones: Sequence[str], lvlms: Sequence[str]) -> list[Stage] | None:
    """The runs of a family in order, or None when it has partitioned assets but no partition to run them
    on (e.g. LVLM assets and no LVLM spec)."""
    if (family.per_backbone or family.per_lvlm) and not (
        (family.per_backbone and backbones) or (family.per_lvlm and lvlms)
    ):
        return None
    name = family.name
    stages = [Stage(name, f"demo_{name}", family.once)] if family.once else []
    if family.per_backbone:
        stages += [
            Stage(f"{name} / backbone {b}", f"demo_{name}_backbone", family.per_backbone, b)
            for b in backbones
        ]
    if family.per_lvlm:
        stages += [Stage(f"{name} / LVLM {m}", f"demo_{name}_lvlm", family.per_lvlm, m) for m in lvlms]
    return [
        *stages,
        Stage(f"{name} leaderboard", f"demo_{name}_leaderboard", [family.leaderboard, *family.after]),
    ]


def step_errors(result: dg.JobExecutionResult) -> dict[str, str]:
    """{failed step key: the error that made it fail}, in order: the user's error inside Dagster's wrapping,
    no traceback; a named error raised from a lower one (StorageFullError from OSError) shows by its name."""
    out = {}
    for event in result.get_step_failure_events():
        error = event.step_failure_data.error
        while error is not None and error.cause is not None and error.cls_name.startswith("Dagster"):
            error = error.cause
        out[event.step_key] = error.message.strip() if error else "no error recorded"
    return out


def first_error(result: dg.JobExecutionResult) -> str:
    """The first failed step's key and the error that made it fail (`step_errors`)."""
    for key, message in step_errors(result).items():
        return f"step {key}: {message}"
    return "the run failed before any step (see `make ui`)"


def _interrupted(result: dg.JobExecutionResult) -> bool:
    """Whether the run ended because of Ctrl-C (it then fails instead of raising): a step failed with an
    interrupt, or the run failed as terminated (an interrupt while no step was running, e.g. waiting)."""
    names = {"KeyboardInterrupt", "DagsterExecutionInterruptedError"}
    if any(
        e.step_failure_data.error and e.step_failure_data.error.cls_name in names
        for e in result.get_step_failure_events()
    ):
        return True
    failures = result.filter_events(lambda e: e.event_type == dg.DagsterEventType.RUN_FAILURE)
    reasons = [getattr(e.job_failure_data.failure_reason, "value", None) for e in failures]
    return "UNEXPECTED_TERMINATION" in reasons


class Runner:
    """Launches the demo's runs through one instance and records which stages failed; with `skip_fresh`, a
    stage whose assets are all `fresh` is reported cached and not run."""

    def __init__(
        self,
        defs: dg.Definitions,
        instance: dg.DagsterInstance,
        overrides: dict,
        location: tuple[str, str] = LOCATION,
        log: Callable[[str], None] | None = None,
        source: str = "make demo",
        skip_fresh: bool = False,
    ):
        self.defs, self.instance, self.overrides, self.location = defs, instance, overrides, location
        self.skip_fresh = skip_fresh
        self.freshness = Freshness(defs, instance)
        self.cached: list[str] = []  # the labels of the stages skipped as cached
        self.source = source  # the soco/source tag of its runs
        self.failed: dict[str, str] = {}
        self.last_run_id: str | None = None  # the run the last `run` launched, and its failed steps
        self.last_errors: dict[str, str] = {}
        self.log = log or (lambda m: print(m, flush=True))

    def skipped(self, stage: Stage) -> bool:
        """With `skip_fresh`, whether `stage` is fresh; then it is reported cached and recorded."""
        if self.skip_fresh and self.freshness.fresh(stage.keys, stage.partition):
            self.log(f"{stage.label}: cached, skipped")
            self.cached.append(stage.label)
            return True
        return False

    def run(self, stage: Stage) -> bool:
        """Materialize one stage in a run of its own unless `skipped`; on failure record and print why,
        return False."""
        return self.skipped(stage) or self.launch(stage)

    def launch(self, stage: Stage, members: Sequence[str] = ()) -> bool:
        """Run one stage now (with `members`, the labels of the stages it joins, printed instead of its
        own); on failure record and print why, return False."""
        for label in members or [stage.label]:
            self.log(f"{label} ...")
        t0 = time.perf_counter()
        tags = {
            "soco/source": self.source,
            SETTINGS_TAG: self.freshness.fingerprint,
            **process_tags(),
            **stage.tags,
        }
        if stage.partition is not None:
            tags["dagster/partition"] = stage.partition
        job = dg.build_reconstructable_job(
            *self.location,
            reconstructable_kwargs={
                "name": stage.job,
                "keys": [k.to_user_string() for k in stage.keys],
                "overrides": self.overrides,
            },
        )
        pools = {self.defs.resolve_assets_def(k).op.pool for k in stage.keys} - {None}
        config = WAITING_RUN_CONFIG if any(pool_is_full(self.instance, p) for p in pools) else RUN_CONFIG
        if stage.ops:
            config = {**config, "ops": stage.ops}
        with one_build_per_run(), dg.execute_job(job, self.instance, run_config=config, tags=tags) as result:
            self.last_run_id, self.last_errors = result.run_id, {}
            if result.success:
                self.log(f"  done in {time.perf_counter() - t0:.1f} s")
                return True
            if result.dagster_run.status == dg.DagsterRunStatus.CANCELED or _interrupted(result):
                raise KeyboardInterrupt
            self.last_errors = step_errors(result)
            reason = first_error(result)
        self.failed[stage.label] = reason
        self.log(f"  FAILED after {time.perf_counter() - t0:.1f} s (run {result.run_id}): {reason}")
        return False


def _add_partitions(instance: dg.DagsterInstance, name: str, keys: Sequence[str]) -> None:
    new = [k for k in keys if k not in set(instance.get_dynamic_partitions(name))]
    if new:
        instance.add_dynamic_partitions(name, new)


def _scan(folder: str, scan, what: str, failed: dict[str, str]) -> list[str]:
    """The valid spec names of `folder`; each invalid one is printed and recorded in `failed`."""
    valid, invalid = scan(Path(folder))
    for name, err in invalid.items():
        print(f"skipping invalid {what} spec {name}: {err}", file=sys.stderr, flush=True)
        failed[f"{what} {name}"] = f"invalid spec: {err}"
    return sorted(valid)


def _latest_metadata(instance: dg.DagsterInstance, key: dg.AssetKey) -> dict:
    """The metadata of `key`'s latest materialization ({} when it has none)."""
    event = instance.get_latest_materialization_event(key)
    return dict(event.asset_materialization.metadata) if event and event.asset_materialization else {}


def _family_board(defs: dg.Definitions, instance: dg.DagsterInstance, key: dg.AssetKey) -> str:
    """A family leaderboard as Markdown: its `leaderboard` Markdown metadata, else its stored table."""
    from soco_pipeline.analysis.leaderboard import leaderboard_markdown

    metadata = _latest_metadata(instance, key)
    if "leaderboard" in metadata:
        return str(metadata["leaderboard"].value)
    value = defs.load_asset_value(key, instance=instance)
    return leaderboard_markdown(value) if isinstance(value, pd.DataFrame) else str(value)


def _summaries(instance: dg.DagsterInstance, keys: Sequence[dg.AssetKey]) -> list[str]:
    """The `summary` Markdown metadata of each of `keys` that has one (e.g. fgbmk_findings), titled."""
    found = {key: _latest_metadata(instance, key).get("summary") for key in keys}
    return [f"{key.to_user_string()}:\n\n{md.value}" for key, md in found.items() if md is not None]


@dataclass
class DemoResult:
    """What the demo produced: SOCO's leaderboard, each family's (Markdown), what failed (label: why) and the
    family tables for the terminal ({family or summary asset: table})."""

    board: pd.DataFrame | None
    family_boards: dict[str, str]
    failed: dict[str, str]
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)  # each family's board and summaries


def run_families(
    defs: dg.Definitions,
    runner: Runner,
    backbones: Sequence[str],
    lvlms: Sequence[str],
    exclude: Sequence[str] = (),
    tables: dict[str, pd.DataFrame] | None = None,
    core: Sequence[dg.AssetKey] = (),
    summary: Stage | None = None,
) -> dict[str, str]:
    """Run every task family of `defs` (see `families`), the stages of one phase joined in one run
    (cli/joined_runs.py): every family's items; per backbone its rows of `core` (SOCO's per-backbone
    assets, labelled `backbone <name>`) and of every family; per LVLM spec every family's; then every board
    with `summary`. A family whose items failed runs no further. Return {family: its leaderboard as
    Markdown}, and put each board and summary table into `tables` when given ({family or summary asset
    name: table})."""
    from soco_pipeline.cli.joined_runs import run_joined

    found = []
    for family in families(defs, exclude):
        stages = family_stages(family, backbones, lvlms)
        if stages is None:
            runner.log(f"{family.name}: no backbone or LVLM spec to run its partitioned assets on, skipped")
        else:
            found.append((family, stages))
    items = [stages[0] for family, stages in found if family.once]
    for stage, (ok, _) in zip(items, run_joined(runner, defs, items, "demo_items"), strict=True):
        if not ok:  # its per-partition assets read what failed: nothing more of the family can run
            found = [(f, st) for f, st in found if st[0] is not stage]
    per = [s for _, stages in found for s in stages if s.partition is not None]
    for b in backbones:
        mine = [Stage(f"backbone {b}", "demo_backbone", list(core), b)] if core else []
        mine += [s for s in per if s.partition == b and s.job.endswith("_backbone")]
        run_joined(runner, defs, mine, "demo_model")  # a failed partition stops only itself
    for m in lvlms:
        run_joined(
            runner, defs, [s for s in per if s.partition == m and s.job.endswith("_lvlm")], "demo_lvlm"
        )
    last = [stages[-1] for _, stages in found] + ([summary] if summary else [])
    results = run_joined(runner, defs, last, "demo_boards")
    boards = {}
    for (family, _), (ok, _) in zip(found, results, strict=False):
        if ok:
            boards[family.name] = "\n".join(
                [
                    _family_board(defs, runner.instance, family.leaderboard),
                    *_summaries(runner.instance, family.after),
                ]
            )
            if tables is not None:
                with quiet():  # loading a value logs one DEBUG line per file on the console
                    tables.update(_values(defs, runner.instance, family))
    return boards


def _values(defs: dg.Definitions, instance: dg.DagsterInstance, family: Family) -> dict[str, pd.DataFrame]:
    """The family's board and summary tables ({family or summary asset name: table})."""
    out = {}
    for key, name in ((family.leaderboard, family.name), *((k, k.to_user_string()) for k in family.after)):
        value = defs.load_asset_value(key, instance=instance)
        if isinstance(value, pd.DataFrame):
            out[name] = value
    return out


@contextmanager
def quiet() -> Iterator[None]:
    """Python logging below WARNING off for the block (Dagster's console lines of loading a value)."""
    logging.disable(logging.INFO)
    try:
        yield
    finally:
        logging.disable(logging.NOTSET)


def run_demo(
    instance: dg.DagsterInstance | None = None, location: tuple[str, str] = LOCATION, **overrides
) -> DemoResult:
    """Materialize everything for every backbone spec and every task family; return the leaderboards."""
    defs = build_definitions(**overrides)
    soco = defs.resources["soco"]
    instance = instance or dg.DagsterInstance.get()
    every = [f.name for f in families(defs)]
    skipped = [
        name for name in every if name not in demo_families(every)
    ]  # before any run: a typo stops here
    from soco_pipeline.backbones.spec_files import scan_specs as scan_backbones
    from soco_pipeline.lvlm.specs import scan_specs as scan_lvlms

    runner = Runner(defs, instance, overrides, location, skip_fresh=True)
    backbones = _scan(soco.backbones_dir, scan_backbones, "backbone", runner.failed)
    lvlms = _scan(soco.lvlms_dir, scan_lvlms, "LVLM", runner.failed)
    _add_partitions(instance, BACKBONES, backbones)
    _add_partitions(instance, LVLMS, lvlms)
    observe_sources(instance, soco)  # a stage whose inputs and code are as when it was made is skipped
    data = Stage(
        f"data and pairs ({soco.source}, {soco.dataset_size})",
        "demo_data_and_pairs",
        list(dg.AssetSelection.groups(*DATA_AND_PAIRS).resolve(defs.resolve_asset_graph())),
    )
    if not runner.run(data):
        return DemoResult(None, {}, runner.failed)
    # With no LVLM spec, the lvlm group runs in the LVLM block of `main` (loopback reference answerers), not
    # here. The summary runs with the boards (correlation reads fgbmk's board, results_database and the
    # results page every family's tables).
    from soco_pipeline.cli.demo_lvlm import lvlm_demo_enabled

    exclude = [LVLM_GROUP] if lvlm_demo_enabled() and not lvlms else []
    exclude += skipped
    tables: dict[str, pd.DataFrame] = {}
    board = None
    summary = Stage(
        "leaderboard, results database, correlation, results page",
        "demo_summary",
        [dg.AssetKey(k) for k in SUMMARY],
    )
    core = [dg.AssetKey(k) for k in PER_BACKBONE]
    boards = run_families(defs, runner, backbones, lvlms, exclude, tables, core, summary)
    if summary.label not in runner.failed:
        from soco_pipeline.report.results_db import query

        settings = soco.settings()
        board = query(
            settings.duckdb_path, "SELECT * FROM leaderboard ORDER BY soc DESC", settings.tables_root
        )
    return DemoResult(board, boards, runner.failed, tables)


def headlines(settings, tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The long headline table of every model: the `model_headlines` table of the results database, or
    (before that table exists) one built from the boards in `tables`."""
    from soco_pipeline.report.console import headlines_from_boards
    from soco_pipeline.report.results_db import ResultsError, query
    from soco_pipeline.trust.roles import spec_roles

    try:
        return query(settings.duckdb_path, "SELECT * FROM model_headlines", settings.tables_root)
    except (ResultsError, FileNotFoundError, ValueError, RuntimeError):
        roles = spec_roles(settings.backbones_dir, settings.lvlms_dir, settings.storage_root)
        return headlines_from_boards(tables, roles, settings.source == "embedded")


def where_the_tables_are(settings) -> list[str]:
    """The closing lines of the first screen: where the full tables are."""
    return [
        "full boards: .venv/bin/soco leaderboard --family soco|mmvm|fgbmk|tpips|lvlm [--columns ...] "
        "[--format csv|json|markdown]",
        f'SQL: .venv/bin/soco sql "select * from model_summary" (DuckDB file {settings.duckdb_path})',
        f"results page: {settings.storage_root}/report/index.html (.venv/bin/soco report --serve); as one file "
        f"with its images inlined: {settings.storage_root}/report.html",
        gap_line(settings),
    ]


def gap_line(settings) -> str:
    """Where the demo's `published_gap` rows come from: the specs that name a published model, or none."""
    from soco_pipeline.evaluation.protocol import load_protocol
    from soco_pipeline.trust.published import spec_references

    refs, _ = spec_references(settings.backbones_dir, load_protocol(settings.protocol_path))
    if refs:
        named = ", ".join(f"{m} (reference: {r})" for m, r in sorted(refs.items()))
        return (
            f'why a number differs from its paper: .venv/bin/soco sql "select * from published_gap" ({named})'
        )
    return (
        "published_gap: no row here, no demo spec names a published model (`reference:`); a spec that does "
        "gets its gap knob by knob from `soco run` (docs/results.md, 'Beside the published figures')"
    )


def main() -> int:
    """Entry point of `python -m soco_pipeline.cli.demo`: 0 when everything ran, 1 when a stage failed, 130
    on Ctrl-C. Prints each board's headline columns (report/console.py: 120 columns), then the summary
    (one row per model, one headline per family) as the last table, and where the full tables are."""
    from soco_pipeline.runtime.interrupts import redeliver_swallowed_interrupts

    with redeliver_swallowed_interrupts():
        return demo_main()


def demo_main() -> int:
    """Run the demo and print its boards and summary; the exit code (`main` runs it with a Ctrl-C that a
    finalizer swallowed delivered again: runtime/interrupts.py)."""
    from soco_pipeline.storage import storage_gone

    t0 = time.perf_counter()
    storage_gone()  # notes the instance in the storage root, so a root moved mid-run is told apart from a fresh one
    try:
        result = run_demo()
    except DemoSettingError as err:
        print(f"make demo: {err}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, dg.DagsterExecutionInterruptedError):
        print(
            "\ninterrupted: the run in progress is marked failed; `make demo` again resumes from what is "
            "materialized",
            file=sys.stderr,
        )
        return 130
    except Exception:  # the instance's database gone with a moved storage root: say that, not sqlite's words
        if gone := storage_gone():
            print(f"make demo: stopped: {gone}", file=sys.stderr)
            return 1
        raise
    from soco_pipeline.analysis.leaderboard import console_board
    from soco_pipeline.defs.shared.resources import SocoSettings
    from soco_pipeline.report.console import console_table, headline_columns, summary_text

    settings = SocoSettings().settings()
    tables = dict(result.tables)
    if result.board is not None:
        tables = {"soco": result.board, **tables}
        shown = console_board(result.board)
        title = "SOCO leaderboard (PCK at the protocol's headline alpha, 0-100)"
        print("\n" + console_table(shown, title, headline_columns("soco", shown), full="soco leaderboard"))
    from soco_pipeline.tasks import family_input_notes

    input_notes = family_input_notes(settings)
    for name, board in result.tables.items():
        full = f"soco leaderboard --family {name}"
        notes = [input_notes[name]] if name in input_notes else []
        print("\n" + console_table(board, name, headline_columns(name, board), full=full, notes=notes))
    # --- the LVLM family (soco_pipeline/cli/demo_lvlm.py): loopback reference answerers, stopped by pid --------
    from soco_pipeline.cli.demo_lvlm import EXPECTED, lvlm_demo_enabled, run_lvlm_demo

    if lvlm_demo_enabled():
        try:
            lvlm = run_lvlm_demo(dg.DagsterInstance.get())
        except (KeyboardInterrupt, dg.DagsterExecutionInterruptedError):
            print("\ninterrupted: the LVLM answerers are stopped; `make demo` again resumes", file=sys.stderr)
            return 130
        tables["lvlm"] = lvlm
        title = f"lvlm (loopback reference answerers; {EXPECTED})"
        print(
            "\n"
            + console_table(
                lvlm, title, headline_columns("lvlm", lvlm), full="soco leaderboard --family lvlm"
            )
        )
    # ------------------------------------------------------------------------------------------------------
    if result.failed:
        print(
            f"\n{len(result.failed)} run(s) failed; the rest ran (fix and `make demo` again: what is "
            "materialized is kept):",
            file=sys.stderr,
        )
        for label, reason in result.failed.items():
            print(f"  {label}: {reason}", file=sys.stderr)
    # the summary is the last table of the screen
    print("\n" + summary_text(headlines(settings, tables), where=where_the_tables_are(settings)), end="")
    print(f"end to end: {time.perf_counter() - t0:.0f} s")
    return 1 if result.failed else 0


if __name__ == "__main__":
    sys.exit(main())
