"""TPIPS assets, declarations only (the domain core is tasks/tpips)."""

import base64

import dagster as dg
import pandas as pd

from soco_pipeline.defs.shared.checks import TableResult, TableSpec, partition_rows, table_out
from soco_pipeline.defs.shared.family import Family
from soco_pipeline.defs.shared.launchers import StepLauncher
from soco_pipeline.defs.shared.partitions import backbones_partitions, lvlms_partitions
from soco_pipeline.defs.shared.resources import SocoSettings
from soco_pipeline.defs.shared.specs import lvlm_spec_for
from soco_pipeline.tasks import tpips
from soco_pipeline.tasks.tpips import schemas
from soco_pipeline.tasks.tpips.config import NEEDS

SIMULATED = "judgements are SIMULATED (noisy-observer model), not human"


def judgements(cfg) -> str:
    """The metadata line saying who gave the votes of the configured source."""
    return SIMULATED if cfg.source.votes_are == "simulated" else f"judgements are {cfg.source.votes_are}"


def not_applicable_scores(model: str, reason: str, inputs) -> pd.DataFrame:
    """The one `n/a` score row of a backbone that cannot score the TPIPS images (a SOCO oracle)."""
    from soco_pipeline.tasks.tpips.evaluate import judgements_of, not_applicable_rows

    votes = [inputs.get(k) for k in ("tpips_ooo", "tpips_afc")]
    return not_applicable_rows(model, reason.removeprefix("not applicable: "), judgements_of(*votes))


def tpips_reads(spec, cfg) -> dict:
    """The spec fields TPIPS reads: everything but `input` (it extracts at the config's input_size), and but
    `layer` where the config names the kind's layers (its derived specs replace the spec's)."""
    from soco_pipeline.backbones.reads import computation, without
    from soco_pipeline.tasks.tpips.features import config_layers

    return without(computation(spec), ["input", *(["layer"] if config_layers(spec, cfg) else [])])


# 6: the per-row outcome tables beside the score tables (the watch's paired test)
FAMILY = Family.of(tpips.SPEC, "tpips-6", needs=NEEDS, reads=tpips_reads)
GROUP, CODE_VERSION = FAMILY.name, FAMILY.code_version


def _render_out(schema, description: str) -> tuple[TableSpec, dg.AssetOut]:
    # No automation condition on the root, so the eager daemon never starts a family nobody asked for.
    return table_out(schema, description, code_version=CODE_VERSION, kinds={"pandas"})


@FAMILY.tables(
    outs={
        "tpips_images": _render_out(
            schemas.ImageSchema,
            "Every TPIPS render (triplets and 2AFC) with its exact aspect values, uri and size.",
        ),
        "tpips_triplets": _render_out(
            schemas.TripletSchema, "The generated triplets: three image ids, the varied aspects, the split."
        ),
        "tpips_afc_items": _render_out(
            schemas.AfcItemSchema, "The generated 2AFC items: reference, two operation outputs, source."
        ),
    }
)
def tpips_renders(context: dg.AssetExecutionContext, soco: SocoSettings) -> dict[str, TableResult]:
    """The configured source's items, made once: generated (rendered under <storage>/tpips) or official."""
    from soco_pipeline.tasks.tpips.source import renders

    cfg = FAMILY.config(soco)
    images, triplets, afc_items, meta = renders(cfg, soco.task_root(GROUP))
    marker = {"judgements": judgements(cfg)}
    return {
        "tpips_images": TableResult(images, {**meta, **marker}),
        "tpips_triplets": TableResult(triplets, {"triplets": len(triplets), **marker}),
        "tpips_afc_items": TableResult(afc_items, {"items": len(afc_items), **marker}),
    }


@FAMILY.table(check=True)  # blocking: vote counts, y on the simplex, non-empty aspects, the simulated marker
def tpips_ooo(
    context: dg.AssetExecutionContext,
    soco: SocoSettings,
    tpips_images: pd.DataFrame,
    tpips_triplets: pd.DataFrame,
) -> TableResult:
    """Odd-one-out (triplet, aspect) rows, pruned and normalised (y ∈ Δ³), simulated or the official votes."""
    from soco_pipeline.tasks.tpips.schemas import ooo_problems
    from soco_pipeline.tasks.tpips.source import ooo_table

    cfg = FAMILY.config(soco)
    ooo, summary = ooo_table(cfg, tpips_images, tpips_triplets)
    return TableResult(
        ooo,
        {
            "judgements": judgements(cfg),
            "summary": dg.MetadataValue.json(summary),
            "by_split": dg.MetadataValue.json(ooo.split.value_counts().to_dict()),
        },
        problems=ooo_problems(ooo, cfg, released=summary.get("format") == "release"),
    )


@FAMILY.table(check=True)  # blocking: as tpips_ooo's
def tpips_afc(
    context: dg.AssetExecutionContext,
    soco: SocoSettings,
    tpips_images: pd.DataFrame,
    tpips_afc_items: pd.DataFrame,
) -> TableResult:
    """2AFC rows (reference, two outputs, aspect, votes), simulated or official; ties and unsure removed."""
    from soco_pipeline.tasks.tpips.schemas import afc_problems
    from soco_pipeline.tasks.tpips.source import afc_table

    cfg = FAMILY.config(soco)
    afc, summary = afc_table(cfg, tpips_images, tpips_afc_items)
    return TableResult(
        afc,
        {"judgements": judgements(cfg), "summary": dg.MetadataValue.json(summary)},
        problems=afc_problems(afc, cfg),
    )


@FAMILY.features_table(schemas.FeatureSchema, "layer")  # a backbone that cannot see the renders: no rows
def tpips_features(
    context: dg.AssetExecutionContext, soco: SocoSettings, spec, tpips_images: pd.DataFrame
) -> TableResult:
    """The shared feature cache filled for the TPIPS images (one spec per layer); manifests with `layer`."""
    from soco_pipeline.tasks.tpips.features import extract_tpips

    cfg = FAMILY.config(soco)
    images = tpips_images[["image_id", "uri", "width", "height", "category"]]
    device = None if soco.device == "auto" else soco.device
    manifests = extract_tpips(spec, images, soco.features_root, cfg, device, log=context.log.info)
    return TableResult(
        pd.concat([m.assign(layer=i) for i, m in enumerate(manifests)], ignore_index=True),
        {"judgements": judgements(cfg)},
    )


def _backbone_inputs(soco: SocoSettings, tpips_features, tpips_images, tpips_ooo, tpips_afc):
    """(image ids, OOO positions, 2AFC positions, the backbone's cached TPIPS features)."""
    from soco_pipeline.tasks.tpips.baselines import afc_positions, ooo_positions
    from soco_pipeline.tasks.tpips.features import features_from_manifest

    ids = tpips_images.image_id.tolist()
    opos, apos = ooo_positions(tpips_ooo, ids), afc_positions(tpips_afc, ids)
    return ids, opos, apos, features_from_manifest(tpips_features, ids, soco.features_root)


@FAMILY.table(schema=schemas.ScoreSchema)
def tpips_pixel_baselines(
    soco: SocoSettings, tpips_images: pd.DataFrame, tpips_ooo: pd.DataFrame, tpips_afc: pd.DataFrame
) -> TableResult:
    """Random, constant, L2, SSIM and (generated data) the aspect oracle on the OOO test split and 2AFC."""
    from soco_pipeline.tasks.tpips.evaluate import pixel_baselines

    cfg = FAMILY.config(soco)
    rows = pixel_baselines(tpips_images, tpips_ooo, tpips_afc, cfg)
    return TableResult(rows, {"judgements": judgements(cfg)})


def not_applicable_outcomes(model: str, reason: str, inputs) -> pd.DataFrame:
    """The outcome table of a backbone that cannot score the TPIPS images: no rows."""
    from soco_pipeline.tasks.tpips.evaluate import no_outcomes

    return no_outcomes()


def _scored(name: str, description: str, kinds: tuple[str, ...] = ("pandas",)):
    """The outs of a per-backbone scoring body: `name` and its per-OOO-row `<name minus _scores>_outcomes`."""
    outcomes = name.removesuffix("_scores") + "_outcomes"
    return {
        name: FAMILY.partition_out(backbones_partitions, schemas.ScoreSchema, description, kinds),
        outcomes: FAMILY.partition_out(
            backbones_partitions,
            schemas.OutcomeSchema,
            f"Each method of {name} on every OOO test (triplet, aspect) row: its agreement (vote share of the "
            "image it picks); the mean x 100 is the method's OOO agreement.",
        ),
    }, {name: not_applicable_scores, outcomes: not_applicable_outcomes}


BASELINE_OUTS, BASELINE_NA = _scored(
    "tpips_baseline_scores",
    "Frozen aspect-agnostic scores of one backbone: the LPIPS-style distance (uncalibrated) and global cosine.",
)
LEARNED_OUTS, LEARNED_NA = _scored(
    "tpips_learned",
    "Late- and mid-fusion metrics and the ablations trained on the OOO train split, scored on test and 2AFC.",
    ("pytorch",),
)


def _tables(parts: list[tuple[pd.DataFrame, pd.DataFrame]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The score rows and the outcome rows of several methods."""
    return tuple(pd.concat([p[i] for p in parts], ignore_index=True) for i in (0, 1))  # type: ignore[return-value]


@FAMILY.tables(BASELINE_OUTS, partitions_def=backbones_partitions, not_applicable=BASELINE_NA)
def tpips_baseline_scores(
    context: dg.AssetExecutionContext,
    soco: SocoSettings,
    tpips_features: pd.DataFrame,
    tpips_images: pd.DataFrame,
    tpips_ooo: pd.DataFrame,
    tpips_afc: pd.DataFrame,
) -> dict[str, TableResult]:
    """Frozen aspect-agnostic scores (LPIPS-style, uncalibrated; global cosine) and their per-row outcomes."""
    from soco_pipeline.tasks.tpips import baselines as b
    from soco_pipeline.tasks.tpips.evaluate import evaluate_sim_outcomes

    backbone, cfg = context.partition_key, FAMILY.config(soco)
    ids, opos, apos, feats = _backbone_inputs(soco, tpips_features, tpips_images, tpips_ooo, tpips_afc)
    scores, outcomes = _tables(
        [
            evaluate_sim_outcomes(
                backbone,
                "lpips_style",
                False,
                b.lpips_style_sim(feats),
                tpips_ooo,
                opos,
                tpips_afc,
                apos,
                note="uncalibrated: no learned LPIPS weights offline",
            ),
            evaluate_sim_outcomes(
                backbone, "cosine", False, b.cosine_sim(feats), tpips_ooo, opos, tpips_afc, apos
            ),
        ]
    )
    meta = {"judgements": judgements(cfg)}
    return {
        "tpips_baseline_scores": TableResult(scores, meta),
        "tpips_baseline_outcomes": TableResult(outcomes, {**meta, "rows": len(outcomes)}),
    }


@FAMILY.tables(LEARNED_OUTS, partitions_def=backbones_partitions, not_applicable=LEARNED_NA)
def tpips_learned(
    context: dg.AssetExecutionContext,
    soco: SocoSettings,
    launcher: StepLauncher,
    tpips_features: pd.DataFrame,
    tpips_images: pd.DataFrame,
    tpips_ooo: pd.DataFrame,
    tpips_afc: pd.DataFrame,
) -> dict[str, TableResult]:
    """Late- and mid-fusion metrics and the two ablations, trained on the OOO train split, scored on test and
    2AFC; aspect-conditioned and compositional retrieval; the training is the `tpips_heads` payload."""
    from soco_pipeline.defs.shared.specs import spec_path
    from soco_pipeline.tasks.tpips.evaluate import judgements_of, no_outcomes, not_applicable_rows
    from soco_pipeline.tasks.tpips.learned import untrainable
    from soco_pipeline.tasks.tpips.sheets import write_contact_sheets

    backbone, cfg = context.partition_key, FAMILY.config(soco)
    reason = untrainable(tpips_ooo)
    # a released test file: the heads need a train split, the board says why they are absent
    if reason is not None:
        marker = {"judgements": judgements(cfg), "not_trained": reason}
        return {
            "tpips_learned": TableResult(
                not_applicable_rows(backbone, reason, judgements_of(tpips_ooo)), marker
            ),
            "tpips_learned_outcomes": TableResult(no_outcomes(), marker),
        }
    result = launcher.run(
        context,
        "tpips_heads",
        {
            "backbone": backbone,
            "spec_file": str(spec_path(soco, backbone)),
            "features": tpips_features,
            "images": tpips_images,
            "ooo": tpips_ooo,
            "afc": tpips_afc,
            "cache_root": soco.features_root,
            "config": cfg.model_dump_json(),
        },
    )
    meta = {**result.metadata, "launcher": launcher.resolved_kind()}
    uris = dict(zip(tpips_images.image_id, tpips_images.uri, strict=True))
    sheets = write_contact_sheets(
        result.extra["retrieval_hits"],
        uris,
        f"{backbone} mid fusion",
        soco.task_root(GROUP, "retrieval", backbone),
    )
    for (q, a), png in sheets.items():
        key = "compositional" if "|" in q else f"retrieval_{q.rsplit('/', 1)[-1]}"
        meta[f"{key}_{a}"] = dg.MetadataValue.md(
            f"![{a}](data:image/png;base64,{base64.b64encode(png).decode()})"
        )
    outcomes = result.extra["tpips_learned_outcomes"]
    return {
        "tpips_learned": TableResult(result.table, {**meta, "judgements": judgements(cfg)}),
        "tpips_learned_outcomes": TableResult(
            outcomes, {"rows": len(outcomes), "judgements": judgements(cfg)}
        ),
    }


@FAMILY.table(lvlms_partitions, schema=schemas.ScoreSchema)
def tpips_lvlm_answers(
    context: dg.AssetExecutionContext,
    soco: SocoSettings,
    tpips_images: pd.DataFrame,
    tpips_ooo: pd.DataFrame,
    tpips_afc: pd.DataFrame,
) -> TableResult:
    """One LVLM's scores: early fusion (pairwise 0-10) and the triplet oracle, on the OOO test split and 2AFC."""
    from soco_pipeline.lvlm.backends import build_backend
    from soco_pipeline.lvlm.cache import AnswerCache
    from soco_pipeline.tasks.tpips.evaluate import score_rows
    from soco_pipeline.tasks.tpips.lvlm import afc_answers, ooo_answers

    model = context.partition_key
    cfg = FAMILY.config(soco)
    spec = lvlm_spec_for(soco, model)
    backend = build_backend(spec)
    cache = AnswerCache(soco.lvlm_cache_root)
    uris = dict(zip(tpips_images.image_id, tpips_images.uri, strict=True))
    test = tpips_ooo[tpips_ooo.split == "test"]
    o = ooo_answers(test, uris, cfg.lvlm, spec, backend, cache)
    a = afc_answers(tpips_afc, uris, cfg.lvlm, spec, backend, cache)
    return TableResult(
        pd.concat(
            [
                score_rows(model, "early_fusion", True, test, o["pairwise"], tpips_afc, a["pairwise"]),
                score_rows(model, "triplet_oracle", True, test, o["triplet"], tpips_afc, a["triplet"]),
            ],
            ignore_index=True,
        ),
        {
            "parse_failures": int(o["parse_failures"]) + int(a["parse_failures"]),
            "judgements": judgements(cfg),
        },
    )


@FAMILY.board(
    partitioned=["tpips_baseline_scores", "tpips_learned", "tpips_lvlm_answers"],
    optional=["tpips_pixel_baselines"],
    schema=schemas.LeaderboardSchema,
)
def tpips_leaderboard(
    context: dg.AssetExecutionContext,
    soco: SocoSettings,
    tpips_pixel_baselines: pd.DataFrame | None,
    tpips_baseline_scores: dict[str, pd.DataFrame],
    tpips_learned: dict[str, pd.DataFrame],
    tpips_lvlm_answers: dict[str, pd.DataFrame],
) -> TableResult:
    """Agreement per aspect (OOO test) next to the rater agreement (Σ y²) and the ceiling (mean max y), every
    model and method, the judgements marker on every row and once on top of the printout; a Fig. 5-style chart."""
    from soco_pipeline.tasks.tpips.leaderboard import (
        agreement_figure,
        board_markdown,
        board_notes,
        leaderboard,
    )

    parts = [tpips_pixel_baselines] if tpips_pixel_baselines is not None else []
    parts += [partition_rows(t) for t in (tpips_baseline_scores, tpips_learned, tpips_lvlm_answers) if t]
    scores = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    board = leaderboard(scores)
    png = agreement_figure(scores)
    cfg = FAMILY.config(soco)
    notes = board_notes(cfg)
    return TableResult(
        board,
        {
            "judgements": judgements(cfg),
            "notes": dg.MetadataValue.json(notes),
            "leaderboard": dg.MetadataValue.md(board_markdown(board, notes)),
            "figure": dg.MetadataValue.md(
                f"![agreement per aspect](data:image/png;base64,{base64.b64encode(png).decode()})"
            ),
        },
    )
