"""`soco run SPEC [SPEC ...] [--families ...] [--limit N]`: add backbone or LVLM specs and materialize their
partitions and the boards on every family through demo.py's Runner (several specs: one process, the boards
once); steps already fresh (cli/freshness.Freshness) are skipped, Ctrl-C fails the run and the same command
resumes."""

from __future__ import annotations

import argparse
import itertools
import shutil
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from soco_pipeline.cli.joined_runs import run_joined
from soco_pipeline.settings import Settings
from soco_pipeline.tasks.core import SOCO

if TYPE_CHECKING:  # `soco --help` and every other command start without Dagster and pandas (issue 53)
    import dagster as dg
    import pandas as pd

SOURCE = "soco run"
LIMITED_OPS = ("predictions", "four_choice_predictions")  # SOCO's ops that take a pair subset


@dataclass
class Added:
    """The spec as added: model name, partition set (backbones | lvlms), spec file in the folder."""

    name: str
    partitions: str
    path: Path
    kind: str


def is_lvlm_spec(path: Path) -> bool:
    """Whether a spec file is an LVLM spec (it has a `backend` field) rather than a backbone spec."""
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return False
    return isinstance(doc, dict) and "backend" in doc


def checked_spec_file(
    src: Path,
    settings: Settings,
    weights: bool = True,
    force: bool = False,
    instance: dg.DagsterInstance | None = None,
) -> tuple[Added, Path]:
    """The spec checked as `add_spec` checks it, nothing copied yet: (where it goes, the file it comes from).
    With `instance`, a backbone spec already accepted in this version skips its kind's check (timm's import)."""
    from soco_pipeline.cli.spec_lookup import resolve_spec

    src = resolve_spec(str(src))  # a path, or a shipped spec's name; else close names and the docs
    if is_lvlm_spec(src):
        from soco_pipeline.lvlm.specs import load_spec

        spec, folder, partitions, kind = load_spec(src), Path(settings.lvlms_dir), "lvlms", "LVLM"
    else:
        from soco_pipeline.backbones.validate import checked_spec
        from soco_pipeline.cli.freshness import spec_accepted

        spec = checked_spec(src, weights=weights, kind=instance is None or not spec_accepted(instance, src))
        folder, partitions, kind = Path(settings.backbones_dir), "backbones", f"backbone ({spec.kind})"
    dest = folder / f"{spec.name}.yaml"
    if dest.exists() and dest.resolve() != src.resolve() and dest.read_bytes() != src.read_bytes():
        if not force:
            raise FileExistsError(
                f"{dest} exists with other content: pass --force to replace it (its results are recomputed), "
                "or rename your spec file (the model's name is the file stem)"
            )
    return Added(spec.name, partitions, dest, kind), src


def install_spec(added: Added, src: Path) -> Added:
    """Copy a checked spec file into its folder (atomically; nothing when the same bytes are there)."""
    dest = added.path
    if not dest.exists() or dest.read_bytes() != src.read_bytes():
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.parent / f".{dest.name}.tmp"
        shutil.copyfile(src, tmp)
        tmp.replace(dest)
    return added


def add_spec(
    src: Path,
    settings: Settings,
    weights: bool = True,
    force: bool = False,
    instance: dg.DagsterInstance | None = None,
) -> Added:
    """Copy the validated spec into its folder; a different file there is replaced only with `force`. With
    `instance`, a backbone spec already accepted in this version skips its kind's check (timm's import)."""
    return install_spec(*checked_spec_file(src, settings, weights, force, instance))


def add_specs(
    sources: list[Path],
    settings: Settings,
    weights: bool = True,
    force: bool = False,
    instance: dg.DagsterInstance | None = None,
) -> list[Added]:
    """`add_spec` of several specs: every one checked before any is copied, so that a bad one adds none; two
    that name one model (the file stem) are an error."""
    checked = [checked_spec_file(src, settings, weights, force, instance) for src in sources]
    seen: dict[str, Path] = {}
    for added, src in checked:
        if added.name in seen:
            raise ValueError(
                f"model {added.name!r} is given twice ({seen[added.name]} and {src}): a model's name is its "
                "spec file's stem; rename one of them"
            )
        seen[added.name] = src
    return [install_spec(added, src) for added, src in checked]


def _latest(instance: dg.DagsterInstance, key: dg.AssetKey, partition: str | None):
    import dagster as dg

    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=key, asset_partitions=[partition] if partition else None), limit=1
    ).records
    return records[0] if records else None


def is_cached(
    instance: dg.DagsterInstance,
    keys: list[dg.AssetKey],
    partition: str | None = None,
    since: float = 0.0,
    limit: str | None = None,
) -> bool:
    """Whether every asset of `keys` was materialized after `since` (by a run with `limit`)."""
    from soco_pipeline.cli.freshness import LIMIT_TAG

    for key in keys:
        record = _latest(instance, key, partition)
        if record is None or record.timestamp < since:
            return False
        if limit is not None:
            run = instance.get_run_by_id(record.run_id)
            if run is None or run.tags.get(LIMIT_TAG, "none") != limit:
                return False
    return True


def spec_since(instance: dg.DagsterInstance, added: Added) -> float:
    """Since when the spec has had its current data version: for a backbone, the oldest observation of
    `backbone_spec` in the unbroken run at this version (observed now); for an LVLM, the file's mtime."""
    import dagster as dg

    if added.partitions != "backbones":
        return added.path.stat().st_mtime
    from soco_pipeline.backbones.spec_files import spec_data_version
    from soco_pipeline.defs.shared.automation import DATA_VERSION_TAG, observation

    version = spec_data_version(added.path)
    instance.report_runless_asset_event(observation("backbone_spec", version, added.name))
    records = instance.fetch_observations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey("backbone_spec"), asset_partitions=[added.name]),
        limit=1000,
    ).records  # newest first
    since = time.time()
    for record in records:
        tags = record.event_log_entry.asset_observation.tags or {}
        if tags.get(DATA_VERSION_TAG) != version:
            break
        since = record.timestamp
    return since


def latest_time(instance: dg.DagsterInstance, keys: list[dg.AssetKey], partition: str | None = None) -> float:
    """The newest materialization time among `keys` (of `partition`); 0 when none is materialized."""
    times = [r.timestamp for k in keys if (r := _latest(instance, k, partition)) is not None]
    return max(times, default=0.0)


def rows_read(defs: dg.Definitions, keys: list[dg.AssetKey], rows: list[dg.AssetKey]) -> list[dg.AssetKey]:
    """Those of `rows` (a model's per-model assets) that the assets `keys` read, directly or further up."""
    import dagster as dg

    upstream = dg.AssetSelection.assets(*keys).upstream().resolve(defs.resolve_asset_graph())
    return [k for k in rows if k in upstream]


def board_current(instance: dg.DagsterInstance, keys: list[dg.AssetKey], after: float) -> bool:
    """Whether every board of `keys` has a materialization made after `after`."""
    return all((r := _latest(instance, k, None)) is not None and r.timestamp >= after for k in keys)


def reused_from(instance: dg.DagsterInstance, keys: list[dg.AssetKey], partition: str) -> dict[str, str]:
    """{table: the model whose stored rows it reused} of the latest materializations of `keys` (of
    `partition`) that came from another model."""
    from soco_pipeline.defs.shared.reuse import REUSED_FROM

    out = {}
    for key in keys:
        record = _latest(instance, key, partition)
        value = record.asset_materialization.metadata.get(REUSED_FROM) if record else None
        if value is not None and getattr(value, "value", value) != partition:
            out[key.path[-1]] = str(getattr(value, "value", value))
    return out


def plan(
    defs: dg.Definitions,
    added: Added,
    families: list[str],
    limit: int | None,
    settings: Settings,
    since: float | None = None,
):
    """The steps of a `soco run`: (stage, cached-check arguments) in order."""
    import dagster as dg

    from soco_pipeline.cli.demo import DATA_AND_PAIRS, LVLM_GROUP, PER_BACKBONE, SUMMARY, Stage
    from soco_pipeline.cli.demo import families as family_groups
    from soco_pipeline.cli.freshness import LIMIT_TAG

    name = added.name
    since = added.path.stat().st_mtime if since is None else since
    graph = defs.resolve_asset_graph()
    data = list(dg.AssetSelection.groups(*DATA_AND_PAIRS).resolve(graph))
    steps = [(Stage(f"data and pairs ({settings.dataset_size})", "demo_data_and_pairs", data), {})]
    lvlm = added.partitions == "lvlms"
    if not lvlm and SOCO.name in families:
        text = "none" if limit is None else str(limit)
        ops = {op: {"config": {"limit": limit}} for op in LIMITED_OPS} if limit is not None else {}
        keys = [dg.AssetKey(k) for k in PER_BACKBONE]
        stage = Stage(f"soco / backbone {name}", "demo_backbone", keys, name, ops, {LIMIT_TAG: text})
        steps.append((stage, {"partition": name, "since": since, "limit": text}))
    items, boards = [], []  # in the order they run: the items, the model's rows, the boards (JOBS)
    for family in family_groups(defs):
        label = SOCO.name if family.name == LVLM_GROUP else family.name  # SOCO's LVLM track is the lvlm group
        own = family.per_lvlm if lvlm else family.per_backbone
        if label not in families or not own:
            continue
        if family.once:
            items.append((Stage(f"{family.name} items", f"demo_{family.name}", family.once), {}))
        what = "LVLM" if lvlm else "backbone"
        job = f"demo_{family.name}_{'lvlm' if lvlm else 'backbone'}"
        stage = Stage(f"{family.name} / {what} {name}", job, own, name)
        cache: dict = {"partition": name, "since": since}
        if family.name == LVLM_GROUP and limit is not None:  # SOCO-LVLM: item groups per setting
            stage.ops = {"lvlm_answers": {"config": {"items_per_setting": limit}}}
            stage.tags, cache["limit"] = {LIMIT_TAG: str(limit)}, str(limit)
        steps.append((stage, cache))
        board = Stage(
            f"{family.name} leaderboard",
            f"demo_{family.name}_leaderboard",
            [family.leaderboard, *family.after],
        )
        boards.append((board, None))  # boards always run: they gain the new model
    # SOCO's board and what reads it (the study, the published figures beside it, the atlas of its rankings):
    # only when SOCO runs
    core_boards = (SOCO.headline.board, "correlation", "published_comparison", "protocol_atlas")
    summary = [dg.AssetKey(k) for k in SUMMARY if SOCO.name in families or k not in core_boards]
    boards.append(
        (Stage("leaderboard, results database, correlation, results page", "demo_summary", summary), None)
    )
    return steps[:1] + items + steps[1:] + boards


JOBS = {"data": "demo_data_and_pairs", "items": "demo_items", "model": "demo_model", "boards": "demo_boards"}


def joint_plan(
    defs: dg.Definitions,
    addeds: list[Added],
    families: list[str],
    limit: int | None,
    settings: Settings,
    sinces: dict[str, float],
):
    """The steps of a `soco run` of several specs: the data and each family's items once, then every model's
    own stages in the order given, then the boards once (the summary last)."""
    data, items, models, boards = None, {}, [], {}
    for added in addeds:
        for i, (stage, cache) in enumerate(plan(defs, added, families, limit, settings, sinces[added.name])):
            if i == 0:
                data = data or (stage, cache)
            elif cache is None:
                boards.setdefault(stage.job, (stage, cache))
            elif stage.partition is None:
                items.setdefault(stage.job, (stage, cache))
            else:
                models.append((stage, cache))
    ordered = sorted(boards.values(), key=lambda step: step[0].job == "demo_summary")  # stable: summary last
    return [data, *items.values(), *models, *ordered]


def phase_of(i: int, cache: dict | None, stage) -> str:
    """Which run of a `soco run` step `i` of the plan joins: data | items | model | boards (JOBS)."""
    if i == 1:
        return "data"
    if cache is None:
        return "boards"
    return "items" if stage.partition is None else "model"


def cached(
    runner, defs: dg.Definitions, added: Added, stage, cache: dict | None, model_keys, ran: bool
) -> bool:
    """Whether a plan step is cached: a model step made since the spec's version and fresh; a board, when
    nothing ran before it here, made after this model's rows it reads (and the spec's last edit for SOCO's
    board and the summary)."""
    if cache is not None:
        return is_cached(runner.instance, stage.keys, **cache) and runner.freshness.fresh(
            stage.keys, stage.partition, None
        )
    if ran:
        return False
    after = latest_time(runner.instance, rows_read(defs, stage.keys, model_keys), added.name)
    if stage.job == "demo_summary":
        after = max(after, added.path.stat().st_mtime)
    return board_current(runner.instance, stage.keys, after) and runner.freshness.fresh(stage.keys)


def _boards(
    defs: dg.Definitions, instance: dg.DagsterInstance, settings: Settings
) -> dict[str, pd.DataFrame]:
    """Every board materialized so far: SOCO's and each family's ({family: table})."""
    import dagster as dg
    import pandas as pd

    from soco_pipeline.cli.demo import families as family_groups
    from soco_pipeline.cli.demo import quiet

    out = {}
    keys = [(SOCO.name, dg.AssetKey(SOCO.headline.board))] + [
        (f.name, f.leaderboard) for f in family_groups(defs)
    ]
    for name, key in keys:
        if instance.get_latest_materialization_event(key) is None:
            continue
        with quiet():  # loading a value logs one DEBUG line per file on the console
            value = defs.load_asset_value(key, instance=instance)
        if isinstance(value, pd.DataFrame):
            out[name] = value
    return out


def cmd_run(args: argparse.Namespace, settings: Settings) -> int:
    """Add one or more specs and evaluate those models on the chosen families, in one process: the data and
    the items once, each model's own runs in turn, the boards once; print each model's card and the summary."""
    import dagster as dg
    import pandas as pd

    from soco_pipeline.cli.demo import LOCATION, Runner, headlines, where_the_tables_are
    from soco_pipeline.cli.freshness import LIMIT_TAG, observe_sources
    from soco_pipeline.defs.definitions import build_definitions
    from soco_pipeline.report.console import WIDTH, console_table, model_card, summary_text
    from soco_pipeline.tasks import family_specs

    known = (SOCO.name, *family_specs())  # SOCO (and its LVLM track) and every family declared in tasks/
    families = [f.strip() for f in (args.families or ",".join(known)).split(",") if f.strip()]
    unknown = [f for f in families if f not in known]
    if unknown:
        raise ValueError(
            f"unknown famil{'ies' if len(unknown) > 1 else 'y'} {', '.join(unknown)}: choose from {', '.join(known)}"
        )
    from soco_pipeline.cli.project import prepare_instance
    from soco_pipeline.storage import is_remote

    def open_instance() -> dg.DagsterInstance:
        prepare_instance()  # DAGSTER_HOME: the Makefile's default has its dagster.yaml
        return dg.DagsterInstance.get()

    # an existing local storage's instance says whether the spec was accepted before; a mistyped or invalid
    # spec on a new storage creates nothing
    there = not is_remote(settings.storage_root) and Path(settings.storage_root).is_dir()
    instance = open_instance() if there else None
    weights = not args.skip_weights_check
    sources = [Path(spec) for spec in args.spec]
    addeds = add_specs(sources, settings, weights=weights, force=args.force, instance=instance)
    for added in addeds:
        print(textwrap.fill(f"{added.kind} {added.name!r}: spec {added.path}", WIDTH, subsequent_indent="  "))
    overrides = settings.definition_overrides()
    overrides = {k: v for k, v in overrides.items() if v is not None}
    defs = build_definitions(**overrides)
    instance = instance or open_instance()
    for added in addeds:
        if added.name not in instance.get_dynamic_partitions(added.partitions):
            instance.add_dynamic_partitions(added.partitions, [added.name])
    observe_sources(instance, defs.resources["soco"])  # the protocol's and the specs' versions, as now
    sinces = {added.name: spec_since(instance, added) for added in addeds}
    steps = joint_plan(defs, addeds, families, args.limit, settings, sinces)
    runner = Runner(defs, instance, overrides, LOCATION, source=SOURCE)
    timings = []
    t0 = time.perf_counter()
    model_keys = {
        added.name: [k for stage, _ in steps if stage.partition == added.name for k in stage.keys]
        for added in addeds
    }
    ran = False  # a board is cached only when no step before it ran in this command
    numbered = list(enumerate(steps, 1))

    def is_step_cached(stage, cache) -> bool:
        if cache is not None:  # a model's or the items' step: its own cache entry
            return cached(runner, defs, addeds[0], stage, cache, [], ran)
        return all(cached(runner, defs, a, stage, cache, model_keys[a.name], ran) for a in addeds)

    def run_key(n) -> tuple[str, str | None]:
        i, (stage, cache) = n
        return phase_of(i, cache, stage), stage.partition  # one run per phase, and per model

    try:
        for (phase, _), group in itertools.groupby(numbered, key=run_key):
            todo = []
            for i, (stage, cache) in group:
                stage.label = f"[{i}/{len(steps)}] {stage.label}"
                if is_step_cached(stage, cache):
                    print(f"{stage.label}: cached, skipped", flush=True)
                    timings.append((stage.label, "cached", 0.0))
                else:
                    todo.append(stage)
            # stages of one phase run together, those of one `--limit` tag (the run's tag) at a time
            for limit in dict.fromkeys(s.tags.get(LIMIT_TAG, "none") for s in todo):
                batch = [s for s in todo if s.tags.get(LIMIT_TAG, "none") == limit]
                for stage, (ok, seconds) in zip(
                    batch, run_joined(runner, defs, batch, JOBS[phase]), strict=True
                ):
                    ran = True
                    status = "ran" if ok else "FAILED"
                    if ok and stage.partition is not None:
                        reused = reused_from(instance, stage.keys, stage.partition)
                        if reused:
                            # the tables are named when the step made others itself (SOCO's matching)
                            part = len(reused) < len(stage.keys)
                            status = f"reused from {', '.join(sorted(set(reused.values())))}"
                            line = f"{stage.label}: rows {status}" + (
                                f" ({', '.join(sorted(reused))})" if part else ""
                            )
                            print(textwrap.fill(line, WIDTH, subsequent_indent="  "), flush=True)
                            status += " (part)" if part else ""
                    timings.append((stage.label, status, seconds))
            if phase == "data" and runner.failed:
                break  # nothing runs without the data
    except (KeyboardInterrupt, dg.DagsterExecutionInterruptedError):
        print(
            f"\ninterrupted: the run in progress is marked failed; `soco run {' '.join(args.spec)}` again "
            "resumes (finished steps are skipped)",
            file=sys.stderr,
        )
        return 130
    timings.sort(key=lambda t: int(t[0][1 : t[0].index("/")]))  # in step order: "[i/n] ..."
    steps_table = pd.DataFrame(timings, columns=["step", "status", "seconds"])
    print("\n" + console_table(steps_table, f"steps ({time.perf_counter() - t0:.0f} s in all)"))
    tables = _boards(defs, instance, settings)
    heads = headlines(settings, tables)
    core_board = tables.get(SOCO.name)
    for added in addeds:
        print(model_card(heads, added.name))
        if core_board is not None and "published_note" in core_board.columns:
            row = core_board[core_board["backbone"] == added.name]
            if len(row) and row["published_note"].iloc[0]:
                print(f"beside the published {row['reference'].iloc[0]}: {row['published_note'].iloc[0]}")
                if "gap_note" in row.columns and row["gap_note"].iloc[0]:  # published_gap, knob by knob
                    print(textwrap.fill(f"why it differs (SOC): {row['gap_note'].iloc[0]}", WIDTH))
                print()
    print(summary_text(heads, where=where_the_tables_are(settings)), end="")
    if runner.failed:
        for label, reason in runner.failed.items():
            print(f"failed: {label}: {reason}", file=sys.stderr)
        return 1
    return 0


def add_command(sub) -> None:
    """Add `soco run` to the `soco` parser's subcommands."""
    s = sub.add_parser(
        "run", help="add specs and evaluate those models on every family (their summary at the end)"
    )
    s.add_argument(
        "spec",
        nargs="+",
        help="a backbone spec YAML (as for add-backbone), an LVLM spec (with `backend:`), or a shipped "
        "spec's name (assets/backbone_presets/, assets/backbones/, assets/lvlm_presets/); several run in one "
        "process, the boards once at the end",
    )
    s.add_argument(
        "--families",
        default=None,
        help="comma-separated: soco and the task families in soco_pipeline/tasks/ (default: all)",
    )
    s.add_argument(
        "--limit",
        type=int,
        default=None,
        help="SOCO: pairs per category; an LVLM: item groups per setting (a partial, marked run)",
    )
    s.add_argument("--force", action="store_true", help="replace a different spec of the same name")
    s.add_argument(
        "--skip-weights-check", action="store_true", help="add the spec before its weights are there"
    )
    s.set_defaults(func=cmd_run)
