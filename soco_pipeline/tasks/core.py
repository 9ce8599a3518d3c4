"""SOCO and its LVLM track (SOCO-LVLM), declared as a family is (`FamilySpec`, one headline each); a module,
not a `tasks/<name>/` folder: `family_specs()` (the task families) leaves them out, `all_specs()` not."""

from __future__ import annotations

from soco_pipeline.evaluation.protocol import load_protocol
from soco_pipeline.lvlm.protocol import load_lvlm_protocol
from soco_pipeline.tasks import FamilySpec, family_specs
from soco_pipeline.trust.family_watch import ArchivedBy, FamilyWatch
from soco_pipeline.trust.headline import EMBEDDED_SOURCE, Headline

COLUMNS = ("backbone", "cc", "soc", "SOC 95% CI", "soc_geo", "cross_soc", "four_choice_circular", "knn_top1")
SOCO = FamilySpec(
    "soco",
    "Backbones: zero-shot correspondence (PCK@0.1)",
    lambda path, settings: load_protocol(settings.protocol_path),  # SOCO's config: its protocol
    headline=Headline(  # its family: "soco" (filled in)
        board="leaderboard",
        values=("soc",),
        label="SOC PCK@0.1 (official reduction)",
        model_column="backbone",
        ci_low="ci95_lo_boot_category_soc",
        ci_high="ci95_hi_boot_category_soc",
        simulated=EMBEDDED_SOURCE,
    ),
    columns=COLUMNS,
    record_name="soco_correspondence",
    rebuild="soco_pipeline.trust.records:rebuild_backbone_record",
    # the regression watch of the SOCO board's levels and 4-choice accuracy: `results_record` archives each
    # snapshot (per-sample scores included), `model_history` (the view soco_history) compares them
    watch=FamilyWatch(
        family="soco",
        headline="SOCO's headline metrics (cc, soc, soc_geo, cross_soc, four_choice)",
        metrics="cc|soc|soc_geo|cross_soc|four_choice",
        per_model=(),
        samples=(),
        reduction="official",
        archived=ArchivedBy("results_record", "model_history", "regression_sensor", "backbones", "2"),
    ),
)
LVLM_FAMILY = FamilySpec(  # the `lvlm` group and board key; its model_summary columns are `soco_lvlm`
    "lvlm",
    "LVLMs: four-choice SOCO-LVLM (average / circular accuracy)",
    lambda path, settings: load_lvlm_protocol(settings.lvlm_protocol_path),
    headline=Headline(
        family="soco_lvlm",
        board="lvlm_leaderboard",
        values=("vis_average",),
        label="4-choice accuracy, Vis. setting",
        where="kind == 'evaluated'",
        ci_low="vis_average_ci95_lo",  # bootstrap over categories, as SOCO's
        ci_high="vis_average_ci95_hi",
        simulated=EMBEDDED_SOURCE,
    ),
    columns=("model", "kind", "*_average", "*_circular"),
    record_name="soco_lvlm",
    rebuild="soco_pipeline.trust.records:rebuild_lvlm_record",
)
CORE_HEADLINES = (SOCO.headline, LVLM_FAMILY.headline)


def all_specs() -> dict[str, FamilySpec]:
    """SOCO's and SOCO-LVLM's declarations by name (SOCO first), then every task family's (`family_specs`)."""
    return {SOCO.name: SOCO, LVLM_FAMILY.name: LVLM_FAMILY, **family_specs()}
