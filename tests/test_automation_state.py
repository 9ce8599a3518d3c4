"""No two stateful nodes of an automation condition share their stored state.

Dagster stores the state of a SINCE node (`since_last_handled`, `since`) under an id built from its
children's names alone, wherever the node sits in the tree. Two SINCE nodes of one condition whose children
have the same names (an OR trigger and the `handled` reset, say) then read and write one state: under the
daemon, ON_CHANGE took the weekly re-evaluation's trigger for its own and requested `metrics` a second
time while the run that was materializing it was still going (seen in tests/test_ui.py under load).
"""

from __future__ import annotations

from collections import Counter

import dagster as dg
import pytest

from soco_pipeline.defs.definitions import build_definitions

pytestmark = pytest.mark.unit

AC = dg.AutomationCondition
STATEFUL = ("SINCE", "NEWLY_TRUE")  # the nodes keyed by their children, not by their place


def stateful_ids(condition: dg.AutomationCondition, key: dg.AssetKey) -> list[str]:
    """The storage ids of every SINCE / NEWLY_TRUE node in `condition`, evaluated for `key`."""
    found: list[str] = []

    def walk(node: dg.AutomationCondition, parent: str | None, index: int | None) -> None:
        uid = node.get_node_unique_id(parent_unique_id=parent, index=index, target_key=key)
        if node.name in STATEFUL:
            found.append(uid)
        for i, child in enumerate(node.children):
            walk(child, uid, i)

    walk(condition, None, None)
    return found


def test_dagster_keys_two_since_nodes_with_like_children_alike():
    """Why the conditions are written as they are: the collision itself (if Dagster starts keying SINCE
    nodes by their whole subtree, this fails and the two-node form of the weekly trigger can go)."""
    key = dg.AssetKey("metrics")
    on_change = (AC.newly_missing() | AC.code_version_changed()).since_last_handled()
    stale = (AC.code_version_changed() | AC.any_deps_match(AC.data_version_changed())).since_last_handled()
    ids = Counter(stateful_ids(on_change & stale, key))  # newly_missing holds a NEWLY_TRUE node of its own
    assert sorted(ids.values()) == [1, 2]


def test_every_automated_asset_keeps_one_state_per_stateful_node():
    graph = build_definitions().resolve_asset_graph()
    checked = 0
    for key in graph.get_all_asset_keys():
        condition = graph.get(key).automation_condition
        if condition is None:
            continue
        ids = stateful_ids(condition, key)
        shared = {uid: n for uid, n in Counter(ids).items() if n > 1}
        assert not shared, f"{key.to_user_string()}: SINCE nodes sharing their stored state: {shared}"
        checked += bool(ids)
    assert checked > 20  # the per-model tables, the boards and the data stages all carry one
