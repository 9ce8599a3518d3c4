"""How `make test` spreads the whole suite over pytest-xdist workers (`--tier-groups`).

- **Groups.** The stack tier is one group that one worker runs test after test (its servers, daemons and
  kills are timed against each other); every other module is a group of its own (its module fixtures are
  built once). A module whose tests are in several tiers is one group of its own too, stack tests
  included: its module fixtures are then built once, not once for the stack worker and once more.
- **Order.** The groups are queued stack first, then the heavy pipeline modules, the other pipeline modules
  and the unit ones (random order within each under `-p randomly`): the longest chains start first and
  short modules fill the end.
- **Heavy groups.** The stack group and every module marked `heavy` (whole demos, daemons, several Dagster
  runs) run only on the first HEAVY_AT_ONCE workers, one per core by default, so no more of them run at a
  time. The workers beyond those (`make test` starts one more than the cores) are fillers: they take light
  groups only, at a lower CPU priority (FILLER_NICE), and so use the time the heavy groups' process trees
  spend waiting without slowing them. Three heavy groups at once on two cores each ran 1.5-2.5x slower than
  alone (docs/benchmarks.md).

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
HEAVY_ENV = "SOCO_TEST_HEAVY_AT_ONCE"  # workers that run heavy groups (default: the machine's cores)
FILLER_NICE = 10  # a filler's niceness: the kernel then gives a normal process about 9x its share of a core


def module_of(nodeid: str) -> str:
    """The test module's path in a node id."""
    return nodeid.split("::")[0]


def order_and_record(items: list, tiers: dict[str, str], heavy: set[str], path: Path) -> None:
    """Sort `items` by tier, heavy ones first within a tier (stable), and write their groups and the heavy
    groups to `path` atomically.

    `tiers` maps each node id to its tier, `heavy` names the node ids marked heavy. A test is in the stack
    group when it is a stack test in a module of stack tests only, else in its module's group."""
    items.sort(key=lambda item: (RANK[tiers[item.nodeid]], item.nodeid not in heavy))
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
    """How many workers run heavy groups: $SOCO_TEST_HEAVY_AT_ONCE, else one per core."""
    return max(1, int(os.environ.get(HEAVY_ENV) or os.cpu_count() or 1))


def is_filler(worker_id: str) -> bool:
    """Whether xdist worker `gwN` is a filler (N >= heavy_at_once()): light groups only."""
    return int(worker_id.removeprefix("gw")) >= heavy_at_once()


class TierScheduling(LoadScopeScheduling):
    """xdist's scope scheduling with the groups the workers recorded as scopes (a test the file does not
    name is scoped by its module), and the heavy groups on the first `heavy_at_once()` workers only."""

    def __init__(self, config, log, path: Path):
        super().__init__(config, log)
        self.path = Path(path)
        self.groups: dict[str, str] | None = None
        self.heavy: set[str] = set()

    def _split_scope(self, nodeid: str) -> str:  # the hook LoadScopeScheduling's subclasses override
        if self.groups is None:
            recorded = json.loads(self.path.read_text())
            self.groups, self.heavy = recorded["groups"], set(recorded["heavy"])
        return self.groups.get(nodeid, module_of(nodeid))

    def next_scope(self, node) -> str | None:
        """The first queued group, or for a filler the first light one (None: none is left for it)."""
        if not is_filler(node.gateway.id):
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
        """Record the test, then offer work again to each filler that has none or holds back its last test
        (xdist runs a test once it knows the next one): it is shut down, and so runs that test, once the
        queue is empty."""
        super().mark_test_complete(node, item_index, duration)
        for other in self.nodes:
            if (
                is_filler(other.gateway.id)
                and not other.shutting_down
                and self._pending_of(self.assigned_work[other]) <= 1
            ):
                self._reschedule(other)
