"""TPIPS assets: data (unpartitioned), features / baselines / learned metrics per backbone, LVLM answers per
model, and the leaderboard. Declarations only: the domain core is soco_pipeline.tasks.tpips; tables go through
the IO manager. The config is assets/tpips.yaml, or the file SOCO_TPIPS_CONFIG names (tests shrink it)."""


import base64
import os

import dagster as dg
import pandas as pd

from soco_pipeline.defs.backbones.assets import spec_for
from soco_pipeline.defs.lvlm.assets import lvlm_spec_for
from soco_pipeline.defs.shared.checks import check_result
from soco_pipeline.defs.shared.executors import GPU_STEP_TAGS
from soco_pipeline.defs.shared.partitions import backbones_partitions, lvlms_partitions
from soco_pipeline.defs.shared.resources import SocoSettings
from soco_pipeline.storage import join

GROUP = "tpips"
EAGER = dg.AutomationCondition.eager()
SIMULATED = "judgements are SIMULATED (noisy-observer model), not human"


def tpips_config():
    """The TPIPS config (SOCO_TPIPS_CONFIG or assets/tpips.yaml)."""
    from soco_pipeline.tasks.tpips.config import load_config

    return load_config(os.environ.get("SOCO_TPIPS_CONFIG") or None)


def data_root(soco: SocoSettings) -> str:
    """Where the TPIPS renders live."""
    return join(soco.settings().storage_root, "tpips")


# No automation condition on the root: it is materialized on request (the demo, the UI), so the eager daemon
# never starts a family nobody asked for; everything below it follows eagerly.
@dg.asset(group_name=GROUP, kinds={"pandas"})
def tpips_images(context: dg.AssetExecutionContext, soco: SocoSettings) -> pd.DataFrame:
    """Every TPIPS render (triplets and 2AFC) with its exact aspect values, uri and size."""
    from soco_pipeline.tasks.tpips.afc import generate_afc
    from soco_pipeline.tasks.tpips.images import write_images
    from soco_pipeline.tasks.tpips.triplets import generate_triplets

    cfg = tpips_config()
    ts = generate_triplets(cfg)
    afc_values, _ = generate_afc(cfg)
    values = pd.concat([ts.images.assign(role="triplet"), afc_values.assign(role="afc")], ignore_index=True)
    written = write_images(values.drop(columns="role"), data_root(soco), cfg)
    out = values.merge(written, on="image_id", validate="one_to_one")
    context.add_output_metadata({"images": len(out), "seed": cfg.seed, "image_size": cfg.image_size})
    return out


@dg.asset(group_name=GROUP, automation_condition=EAGER, kinds={"pandas"})
def tpips_ooo(context: dg.AssetExecutionContext, tpips_images: pd.DataFrame) -> pd.DataFrame:
    """Odd-one-out (triplet, aspect) rows with simulated votes, pruned and normalised (y ∈ Δ³)."""
    from soco_pipeline.tasks.tpips.ooo import annotate_triplets
    from soco_pipeline.tasks.tpips.triplets import generate_triplets

    cfg = tpips_config()
    ooo, summary = annotate_triplets(generate_triplets(cfg), cfg)
    context.add_output_metadata({"judgements": SIMULATED, "observer": dg.MetadataValue.json(summary["observer"]),
                                 "asked": summary["asked"], "kept": summary["kept"], "pruned": summary["pruned"],
                                 "by_split": dg.MetadataValue.json(ooo.split.value_counts().to_dict())})
    return ooo


@dg.asset(group_name=GROUP, automation_condition=EAGER, kinds={"pandas"})
def tpips_afc(context: dg.AssetExecutionContext, tpips_images: pd.DataFrame) -> pd.DataFrame:
    """2AFC rows (reference, two operation outputs, aspect, simulated votes); ties and >= 3 cannot-tell removed."""
    from soco_pipeline.tasks.tpips.afc import annotate_afc, generate_afc

    cfg = tpips_config()
    values, items = generate_afc(cfg)
    afc, summary = annotate_afc(values, items, cfg)
    context.add_output_metadata({"judgements": SIMULATED, "kept": summary["kept"], "pruned": summary["pruned"],
                                 "by_source": dg.MetadataValue.json(summary["by_source"])})
    return afc


@dg.multi_asset_check(
    specs=[dg.AssetCheckSpec("schema", asset=a, blocking=True) for a in ("tpips_ooo", "tpips_afc")],
    can_subset=True,
)
def tpips_schema_checks(context: dg.AssetCheckExecutionContext, tpips_ooo: pd.DataFrame, tpips_afc: pd.DataFrame):
    """Blocking checks: vote counts, y on the simplex, non-empty aspects, the simulated-judgements marker."""
    from soco_pipeline.tasks.tpips.schemas import afc_problems, ooo_problems

    cfg = tpips_config()
    yield check_result("tpips_ooo", ooo_problems(tpips_ooo, cfg))
    yield check_result("tpips_afc", afc_problems(tpips_afc, cfg))


@dg.asset(group_name=GROUP, partitions_def=backbones_partitions, pool="gpu", op_tags=GPU_STEP_TAGS,
          automation_condition=EAGER, kinds={"pytorch"})
def tpips_features(context: dg.AssetExecutionContext, soco: SocoSettings, tpips_images: pd.DataFrame) -> pd.DataFrame:
    """The shared feature cache filled for the TPIPS images (one derived spec per layer); the manifests, with
    `layer`. A backbone that cannot see these images (the SOCO oracles) gives an empty table and its reason."""
    from soco_pipeline.tasks.tpips.features import extract_tpips, not_applicable

    spec = spec_for(soco, context.partition_key)
    cfg = tpips_config()
    reason = not_applicable(spec, cfg)
    if reason:
        context.add_output_metadata({"not_applicable": reason})
        from soco_pipeline.features.layout import MANIFEST_COLUMNS

        return pd.DataFrame(columns=[*MANIFEST_COLUMNS, "layer"])  # same columns as an applicable partition
    device = None if soco.device == "auto" else soco.device
    images = tpips_images[["image_id", "uri", "width", "height", "category"]]
    manifests = extract_tpips(spec, images, soco.settings().features_root, cfg, device, log=context.log.info)
    return pd.concat([m.assign(layer=i) for i, m in enumerate(manifests)], ignore_index=True)


def _features(soco: SocoSettings, backbone: str, ids: list[str], cfg):
    from soco_pipeline.tasks.tpips.features import load_tpips_features

    device = None if soco.device == "auto" else soco.device
    return load_tpips_features(spec_for(soco, backbone), ids, soco.settings().features_root, cfg, device)


def _positions(tpips_images, tpips_ooo, tpips_afc):
    from soco_pipeline.tasks.tpips.baselines import afc_positions, ooo_positions

    ids = tpips_images.image_id.tolist()
    return ids, ooo_positions(tpips_ooo, ids), afc_positions(tpips_afc, ids)


@dg.asset(group_name=GROUP, automation_condition=EAGER, kinds={"pandas"})
def tpips_pixel_baselines(tpips_images: pd.DataFrame, tpips_ooo: pd.DataFrame, tpips_afc: pd.DataFrame) -> pd.DataFrame:
    """Random (1/3, 1/2), constant, L2 and SSIM, and the aspect-distance oracle on the OOO test split and 2AFC."""
    from soco_pipeline.tasks.tpips import baselines as b
    from soco_pipeline.tasks.tpips.evaluate import evaluate_sim
    from soco_pipeline.tasks.tpips.images import load_pixels

    cfg = tpips_config()
    ids, opos, apos = _positions(tpips_images, tpips_ooo, tpips_afc)
    pixels = load_pixels(tpips_images.uri.tolist())
    methods = [("random", False, b.random_sim(cfg.seed)), ("l2", False, b.l2_sim(pixels)),
               ("ssim", False, b.ssim_sim(pixels)), ("oracle", True, b.oracle_sim(tpips_images, ids, cfg))]
    return pd.concat([evaluate_sim("pixels", m, c, s, tpips_ooo, opos, tpips_afc, apos) for m, c, s in methods],
                     ignore_index=True)


@dg.asset(group_name=GROUP, partitions_def=backbones_partitions, automation_condition=EAGER, kinds={"pandas"})
def tpips_baseline_scores(context: dg.AssetExecutionContext, soco: SocoSettings, tpips_features: pd.DataFrame,
                          tpips_images: pd.DataFrame, tpips_ooo: pd.DataFrame, tpips_afc: pd.DataFrame) -> pd.DataFrame:
    """Frozen aspect-agnostic scores of one backbone: the LPIPS-style distance (uncalibrated) and global cosine."""
    from soco_pipeline.tasks.tpips import baselines as b
    from soco_pipeline.tasks.tpips.evaluate import evaluate_sim, not_applicable_rows
    from soco_pipeline.tasks.tpips.features import not_applicable

    backbone = context.partition_key
    cfg = tpips_config()
    reason = not_applicable(spec_for(soco, backbone), cfg)
    if reason:
        return not_applicable_rows(backbone, reason)
    ids, opos, apos = _positions(tpips_images, tpips_ooo, tpips_afc)
    feats = _features(soco, backbone, ids, cfg)
    return pd.concat([
        evaluate_sim(backbone, "lpips_style", False, b.lpips_style_sim(feats), tpips_ooo, opos, tpips_afc, apos,
                     note="uncalibrated: no learned LPIPS weights offline"),
        evaluate_sim(backbone, "cosine", False, b.cosine_sim(feats), tpips_ooo, opos, tpips_afc, apos),
    ], ignore_index=True)


@dg.asset(group_name=GROUP, partitions_def=backbones_partitions, automation_condition=EAGER, kinds={"pytorch"})
def tpips_learned(context: dg.AssetExecutionContext, soco: SocoSettings, tpips_features: pd.DataFrame,
                  tpips_images: pd.DataFrame, tpips_ooo: pd.DataFrame, tpips_afc: pd.DataFrame) -> pd.DataFrame:
    """Late- and mid-fusion metrics (and the two ablations) trained on the OOO train split, scored on test and
    2AFC; aspect-conditioned retrieval with the mid-fusion metric, one contact sheet per (query, aspect)."""
    from soco_pipeline import storage
    from soco_pipeline.tasks.tpips.evaluate import evaluate_sim, not_applicable_rows
    from soco_pipeline.tasks.tpips.features import not_applicable
    from soco_pipeline.tasks.tpips.learned import KINDS, AspectVocab, train_metric
    from soco_pipeline.tasks.tpips.retrieval import contact_sheet, retrieve

    backbone = context.partition_key
    cfg = tpips_config()
    reason = not_applicable(spec_for(soco, backbone), cfg)
    if reason:
        return not_applicable_rows(backbone, reason)
    ids, opos, apos = _positions(tpips_images, tpips_ooo, tpips_afc)
    feats = _features(soco, backbone, ids, cfg)
    vocab = AspectVocab(cfg.aspects)
    parts, meta, trained = [], {}, {}
    for kind in KINDS:
        m = train_metric(kind, feats, tpips_ooo, opos, vocab, cfg.learned)
        trained[kind] = m
        parts.append(evaluate_sim(backbone, kind, kind in ("late", "mid"), m.sim, tpips_ooo, opos, tpips_afc, apos,
                                  note=f"epochs {m.epochs}, best {m.best_epoch}, tau {m.tau:.4f}"))
        meta[f"{kind}_triplets_per_s"] = round(m.triplets_per_second, 1)
    # retrieval over the triplet images with the conditioned mid-fusion metric
    pool = tpips_images.role.eq("triplet").to_numpy()
    queries = [int(i) for i in pool.nonzero()[0][: cfg.retrieval.queries]]
    hits = retrieve(trained["mid"].sim, ids, queries, [a for a in cfg.aspects if a != "overall"],
                    cfg.retrieval.top_k, cfg.retrieval.overall_penalty)
    uri = dict(zip(tpips_images.image_id, tpips_images.uri, strict=True))
    sheets = join(soco.settings().storage_root, "tpips", "retrieval", backbone)
    for (q, a), g in hits.groupby(["query_id", "aspect"], sort=True):
        png = contact_sheet(uri[q], [uri[i] for i in g.image_id], f"{a} | {backbone} mid fusion")
        path = join(sheets, f"{q.replace('/', '_')}_{a}.png")
        storage.write_bytes_atomic(path, png)
        meta[f"retrieval_{q.rsplit('/', 1)[-1]}_{a}"] = dg.MetadataValue.md(
            f"![{a}](data:image/png;base64,{base64.b64encode(png).decode()})")
    context.add_output_metadata({**meta, "judgements": SIMULATED})
    return pd.concat(parts, ignore_index=True)


@dg.asset(group_name=GROUP, partitions_def=lvlms_partitions, automation_condition=EAGER, kinds={"pandas"})
def tpips_lvlm_answers(context: dg.AssetExecutionContext, soco: SocoSettings, tpips_images: pd.DataFrame,
                       tpips_ooo: pd.DataFrame, tpips_afc: pd.DataFrame) -> pd.DataFrame:
    """One LVLM's scores: early fusion (pairwise 0-10) and the triplet oracle, on the OOO test split and 2AFC."""
    from soco_pipeline.lvlm.backends import build_backend
    from soco_pipeline.lvlm.cache import AnswerCache
    from soco_pipeline.tasks.tpips.evaluate import score_rows
    from soco_pipeline.tasks.tpips.lvlm import afc_answers, ooo_answers

    model = context.partition_key
    cfg = tpips_config()
    spec = lvlm_spec_for(soco, model)
    backend = build_backend(spec)
    cache = AnswerCache(join(soco.settings().lvlm_root, "cache"))
    uris = dict(zip(tpips_images.image_id, tpips_images.uri, strict=True))
    test = tpips_ooo[tpips_ooo.split == "test"]
    o = ooo_answers(test, uris, cfg.lvlm, spec, backend, cache)
    a = afc_answers(tpips_afc, uris, cfg.lvlm, spec, backend, cache)
    context.add_output_metadata({"parse_failures": int(o["parse_failures"]) + int(a["parse_failures"])})
    return pd.concat([score_rows(model, "early_fusion", True, test, o["pairwise"], tpips_afc, a["pairwise"]),
                      score_rows(model, "triplet_oracle", True, test, o["triplet"], tpips_afc, a["triplet"])],
                     ignore_index=True)


@dg.asset(group_name=GROUP, deps=[tpips_pixel_baselines, tpips_baseline_scores, tpips_learned, tpips_lvlm_answers],
          automation_condition=EAGER, kinds={"pandas"})
def tpips_leaderboard(context: dg.AssetExecutionContext, soco: SocoSettings) -> pd.DataFrame:
    """Agreement per aspect (OOO test) next to the consensus ceiling, every model and method; a Fig. 5-style chart."""
    from soco_pipeline.storage import exists, read_parquet
    from soco_pipeline.tables import table_for
    from soco_pipeline.tasks.tpips.leaderboard import agreement_figure, leaderboard

    root = soco.settings().tables_root
    parts = []
    if exists(table_for("tpips_pixel_baselines").path(root)):
        parts.append(read_parquet(table_for("tpips_pixel_baselines").path(root)))
    for asset, parts_def in (("tpips_baseline_scores", backbones_partitions), ("tpips_learned", backbones_partitions),
                             ("tpips_lvlm_answers", lvlms_partitions)):
        for key in context.instance.get_dynamic_partitions(parts_def.name):
            path = table_for(asset).path(root, key)
            if exists(path):
                parts.append(read_parquet(path))
    scores = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    board = leaderboard(scores)
    png = agreement_figure(scores)
    context.add_output_metadata({
        "judgements": SIMULATED,
        "leaderboard": dg.MetadataValue.md(board.round(1).to_markdown(index=False) if len(board) else "empty"),
        "figure": dg.MetadataValue.md(f"![agreement per aspect](data:image/png;base64,{base64.b64encode(png).decode()})"),
    })
    return board
