"""How `make test` spreads the whole suite over pytest-xdist workers (`--tier-groups`): the stack tier is one
group that one worker runs test after test (its servers, daemons and kills are timed against each other),
every other module is a group of its own (its module fixtures are built once), and the groups are queued
stack first, then the pipeline modules, then the unit ones (random order within each under `-p randomly`):
the longest chain starts first and short modules fill the end. A module with tests of several tiers is one
group of its own, stack tests included, so its module fixtures are built once (test_trust_pipeline's 36 s
fixture was built twice when its browser test joined the stack group on another worker).

xdist's own `--dist loadgroup` cannot do this under pytest 9: it names a test's group by rewriting the test's
node id (`item._nodeid`, which pytest 9 no longer reads), so each test became a group of its own (measured:
test_pipeline's module fixture built twice, test_ui's `dagster dev` started on two workers). Here each
worker writes every test's group to a file (the same file from every worker: they collect the same tests in
the same order), and the controller's scheduler, a LoadScopeScheduling whose scope is that group, reads it
when it first splits the collection into groups, after every worker has finished collecting.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from xdist.scheduler import LoadScopeScheduling

RANK = {"stack": 0, "pipeline": 1, "unit": 2}
FILE_ENV = "SOCO_TEST_GROUPS_FILE"  # set by the controller before it starts the workers


def module_of(nodeid: str) -> str:
    """The test module's path in a node id."""
    return nodeid.split("::")[0]


def fewest_fixtures_first(items: list) -> None:
    """Within each module (the modules keep their order), the tests that need fewer fixtures first (stable,
    so `-p randomly`'s shuffle stays among equals). A module's fixtures are then built one at a time in
    the setups of successive tests, not all in the setup of a test that needs every one of them (the
    scale-out module: its stack 25-31 s, its data 12 s and the backfill about 40 s alone, which added up in
    one setup whenever a backfill test came first)."""
    first: dict[str, int] = {}
    for i, item in enumerate(items):
        first.setdefault(module_of(item.nodeid), i)
    items.sort(key=lambda item: (first[module_of(item.nodeid)], len(getattr(item, "fixturenames", ()))))


def order_and_record(items: list, tiers: dict[str, str], path: Path) -> None:
    """Sort `items` by tier (stable) and write {node id: group} to `path` atomically: `stack` for a stack
    test in a module of stack tests only, else the test's module."""
    items.sort(key=lambda item: RANK[tiers[item.nodeid]])
    mixed = {module_of(n) for n, tier in tiers.items() if tier != "stack"}
    groups = {
        n: "stack" if tier == "stack" and module_of(n) not in mixed else module_of(n)
        for n, tier in tiers.items()
    }
    partial = path.with_name(f"{path.name}.{os.getpid()}")
    partial.write_text(json.dumps(groups))
    os.replace(partial, path)


class TierScheduling(LoadScopeScheduling):
    """xdist's scope scheduling with the groups the workers recorded as scopes (a test the file does not
    name is scoped by its module)."""

    def __init__(self, config, log, path: Path):
        super().__init__(config, log)
        self.path, self.groups = Path(path), None

    def _split_scope(self, nodeid: str) -> str:  # the hook LoadScopeScheduling's subclasses override
        if self.groups is None:
            self.groups = json.loads(self.path.read_text())
        return self.groups.get(nodeid, module_of(nodeid))
