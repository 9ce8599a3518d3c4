"""When each board was last materialized, and the warning for a board whose file has vanished since."""

from collections.abc import Iterable

import dagster as dg
import pandas as pd


def latest_materialization(instance: dg.DagsterInstance, asset: str) -> pd.Timestamp | None:
    """When `asset` was last materialized (UTC), None if never."""
    event = instance.get_latest_materialization_event(dg.AssetKey(asset))
    return None if event is None else pd.Timestamp(event.timestamp, unit="s", tz="UTC")


def board_materializations(instance: dg.DagsterInstance, boards: Iterable[str] | None = None) -> dict:
    """{board: when last materialized (UTC) or None} for `boards` (default: every `*leaderboard` asset)."""
    if boards is None:
        keys = instance.get_asset_keys()
        boards = [
            k.path[-1] for k in keys if k.path[-1] == "leaderboard" or k.path[-1].endswith("_leaderboard")
        ]
    return {b: latest_materialization(instance, b) for b in boards}


def warn_vanished(context: dg.AssetExecutionContext, when: dict, tables_root: str) -> dict:
    """Log a warning per materialized board whose file is gone; the metadata that says so ({} when none)."""
    from soco_pipeline.trust.headline import vanished_boards

    gone = vanished_boards(when, tables_root)
    for text in gone.values():
        context.log.warning(text)
    return {"missing_boards": dg.MetadataValue.md("\n".join(f"- {t}" for t in gone.values()))} if gone else {}
