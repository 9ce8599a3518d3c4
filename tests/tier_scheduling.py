"""How `make test` spreads the whole suite over pytest-xdist workers (`--tier-groups`).

- **Groups.** The stack tier is one group that one worker runs test after test (its servers, daemons and
  kills are timed against each other); every other module is a group of its own (its module fixtures are
  built once). A module whose tests are in several tiers is one group of its own too, stack tests
  included: its module fixtures are then built once, not once for the stack worker and once more.
- **Order.** The groups are queued stack first, then the pipeline modules, then the unit ones (random order
  within each under `-p randomly`): the longest chain starts first and short modules fill the end.
- **Heavy groups.** The stack group and every module marked `heavy` (whole demos, daemons, several Dagster
  runs) run at most HEAVY_AT_ONCE at a time, one per core by default: a worker that would start one more
  takes the next light group instead, or waits for a heavy one to end when no light group is left. Three
  heavy groups at once on two cores each ran 1.5-2.5x slower than alone (docs/benchmarks.md), each a
  tree of processes; the light groups fill the time they spend waiting on their children.

xdist's own `--dist loadgroup` cannot group under pytest 9: it names a test's group by rewriting the test's
node id (`item._nodeid`, which pytest 9 no longer reads), so each test became a group of its own (measured:
test_pipeline's module fixture built twice, test_ui's `dagster dev` started on two workers). Here each
worker writes every test's group, and which groups are heavy, to a file (the same file from every worker:
they collect the same tests in the same order), and the controller's scheduler, a LoadScopeScheduling whose
scope is that group, reads it when it first splits the collection into groups, after every worker has
finished collecting.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from xdist.scheduler import LoadScopeScheduling

RANK = {"stack": 0, "pipeline": 1, "unit": 2}
STACK = "stack"
FILE_ENV = "SOCO_TEST_GROUPS_FILE"  # set by the controller before it starts the workers
HEAVY_ENV = "SOCO_TEST_HEAVY_AT_ONCE"  # heavy groups at a time (default: the machine's cores)


def module_of(nodeid: str) -> str:
    """The test module's path in a node id."""
    return nodeid.split("::")[0]


def order_and_record(items: list, tiers: dict[str, str], heavy: set[str], path: Path) -> None:
    """Sort `items` by tier (stable) and write their groups and the heavy groups to `path` atomically.

    `tiers` maps each node id to its tier, `heavy` names the node ids marked heavy. A test is in the stack
    group when it is a stack test in a module of stack tests only, else in its module's group."""
    items.sort(key=lambda item: RANK[tiers[item.nodeid]])
    mixed = {module_of(n) for n, tier in tiers.items() if tier != STACK}
    groups = {
        item.nodeid: STACK
        if tiers[item.nodeid] == STACK and module_of(item.nodeid) not in mixed
        else module_of(item.nodeid)
        for item in items
    }
    heavy_groups = sorted({STACK} | {groups[n] for n in heavy if n in groups})
    partial = path.with_name(f"{path.name}.{os.getpid()}")
    partial.write_text(json.dumps({"groups": groups, "heavy": heavy_groups}))
    os.replace(partial, path)


def heavy_at_once() -> int:
    """How many heavy groups may run at a time: $SOCO_TEST_HEAVY_AT_ONCE, else one per core."""
    return max(1, int(os.environ.get(HEAVY_ENV) or os.cpu_count() or 1))


class TierScheduling(LoadScopeScheduling):
    """xdist's scope scheduling with the groups the workers recorded as scopes (a test the file does not
    name is scoped by its module), and at most `limit` heavy groups running at a time."""

    def __init__(self, config, log, path: Path, limit: int):
        super().__init__(config, log)
        self.path, self.limit = Path(path), limit
        self.groups: dict[str, str] | None = None
        self.heavy: set[str] = set()

    def _split_scope(self, nodeid: str) -> str:  # the hook LoadScopeScheduling's subclasses override
        if self.groups is None:
            recorded = json.loads(self.path.read_text())
            self.groups, self.heavy = recorded["groups"], set(recorded["heavy"])
        return self.groups.get(nodeid, module_of(nodeid))

    def heavy_elsewhere(self, node) -> int:
        """Workers other than `node` with a heavy group unfinished (a worker runs one group at a time, so a
        second one sent ahead does not count twice).

        An xdist worker runs a test once it knows the next one, so a worker that was sent no more holds back
        its last test: with one test pending it runs nothing, and it does not count (it runs that test when it
        is sent its next group, and it is sent one as soon as that fits the limit). `node` does not count
        either: it runs its groups one after the other."""
        return sum(
            any(scope in self.heavy and not all(done.values()) for scope, done in work.items())
            for other, work in self.assigned_work.items()
            if other is not node and self._pending_of(work) >= 2
        )

    def next_scope(self, node) -> str | None:
        """The first queued group, or the first light one while `limit` heavy groups run elsewhere; None: wait."""
        if self.heavy_elsewhere(node) < self.limit:
            return next(iter(self.workqueue))
        return next((scope for scope in self.workqueue if scope not in self.heavy), None)

    def _assign_work_unit(self, node) -> None:  # LoadScopeScheduling's hook: give `node` one group
        scope = self.next_scope(node)
        if scope is None:
            return
        work_unit = self.workqueue.pop(scope)
        self.assigned_work.setdefault(node, {})[scope] = work_unit
        collection = self.registered_collections[node]
        node.send_runtest_some([collection.index(n) for n, done in work_unit.items() if not done])

    def mark_test_complete(self, node, item_index: int, duration: float = 0) -> None:
        """Record the test, then offer work to every other worker that has run out of it or holds back its last
        test: the test may have ended a heavy group that one of them waits for."""
        super().mark_test_complete(node, item_index, duration)
        for other in self.nodes:
            if (
                other is not node
                and not other.shutting_down
                and self._pending_of(self.assigned_work[other]) <= 1
            ):
                self._reschedule(other)
