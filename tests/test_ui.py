"""The operator's path, for real: `dagster dev`, a GraphQL launch, the sensor and automation, the UI.

Starts webserver + daemon on a free loopback port with a temporary DAGSTER_HOME and launches the data and
pair assets through GraphQL as the UI's Materialize button does (the module's fixtures). A fixture adds a
backbone spec and the backbone sensor adds its partition; one test follows eager automation through the
per-backbone assets, another through the boards and the SQL views after them. One checks what the
server serves (asset groups, sensors and their default status, daemon health). Another drives headless Chromium to the asset graph
and to a table's page with its metadata; screenshots go under the test's temporary folder.

The spec arrives after the data, as when a researcher adds a model to a running deployment: the daemon
then runs the backbone's whole per-backbone chain in one run. A backbone present before the data (its
tables requested tick by tick while the data run writes) is test_family_automation's case.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import dagster as dg
import pytest

from soco_pipeline.deploy.processes import wait_for
from tests.core import DATA_AND_PAIRS, SCHEMA_CHECKED, materializations
from tests.dagster_server import PROJECT_ROOT, DagsterDev, write_instance_yaml
from tests.needs import need
from tests.tiny_families import tiny_family_env

# `dagster dev`, a data run and the automated chain after a new spec
pytestmark = [pytest.mark.stack, pytest.mark.timeout(1200)]

CHROMIUM = Path("/usr/bin/chromium")
BACKBONES = ["oracle_part"]  # one backbone: the UI path (launch, sensor, automation), not extraction
DERIVED_FROM_DATA = ["sample_hashes", "lvlm_items"]  # what automation runs after the data, before any spec


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ui")
    storage, home, backbones = tmp / "storage", tmp / "home", tmp / "backbones"
    backbones.mkdir()  # empty: the test adds the spec once the data are there
    write_instance_yaml(home, storage)
    env = {
        "SOCO_STORAGE": str(storage),
        "SOCO_BACKBONES_DIR": str(backbones),
        "SOCO_CATEGORIES": "car,bus,chair",
        "SOCO_IMAGES_PER_CATEGORY": "4",
        "HF_HUB_OFFLINE": "1",
        "DAGSTER_DISABLE_TELEMETRY": "1",
        **tiny_family_env(tmp / "families"),  # automation reaches every family: at their smallest
        "SOCO_SENSOR_INTERVAL_S": "5",  # the eager chain advances a step per tick
    }
    dev = DagsterDev(home, env, tmp / "dagster_dev.log")
    try:
        dev.wait_ready()
        yield dev, storage, home, tmp
    finally:
        dev.stop()


def test_dagster_dev_serves_every_asset_group_with_the_default_sensors_running(server):
    """What an operator's first screen rests on: the code location's asset groups and sensors as the
    definitions declare them, each sensor running or stopped as its default status says, and every daemon
    the instance needs healthy."""
    from soco_pipeline.defs.definitions import defs

    dev, _storage, _home, _tmp = server
    data = dev.graphql(
        """
        query Location($r: RepositorySelector!) {
          repositoryOrError(repositorySelector: $r) {
            __typename
            ... on Repository { assetGroups { groupName } sensors { name sensorState { status } } }
          }
        }""",
        {"r": {"repositoryLocationName": "soco_pipeline", "repositoryName": "__repository__"}},
    )
    repo = data["repositoryOrError"]
    assert repo["__typename"] == "Repository", repo
    groups = {
        g for a in defs.assets if isinstance(a, dg.AssetsDefinition) for g in a.group_names_by_key.values()
    }
    assert {g["groupName"] for g in repo["assetGroups"]} == groups
    served = {s["name"]: s["sensorState"]["status"] for s in repo["sensors"]}
    assert served == {s.name: s.default_status.value for s in defs.sensors}
    assert "RUNNING" in served.values() and "STOPPED" in served.values()
    health = "{ instance { daemonHealth { allDaemonStatuses { daemonType required healthy } } } }"

    def unhealthy() -> list[str]:  # a daemon counts as healthy from its first heartbeat on
        daemons = dev.graphql(health)["instance"]["daemonHealth"]["allDaemonStatuses"]
        return [d["daemonType"] for d in daemons if d["required"] and not d["healthy"]]

    deadline = time.time() + 120
    while unhealthy() and time.time() < deadline:
        time.sleep(1)
    assert unhealthy() == []


def _materialized(instance: dg.DagsterInstance, key: str, partition: str | None = None) -> bool:
    return bool(materializations(instance, key, partition, limit=1))


@pytest.fixture(scope="module")
def launched(server):
    """The data and pair assets launched through GraphQL as the UI's Materialize button does, with their
    schema checks; the instance is returned once the run succeeded."""
    dev, storage, home, _tmp = server
    instance = dg.DagsterInstance.from_config(str(home))
    run_id = dev.launch_assets(DATA_AND_PAIRS, checks=[(a, "schema") for a in SCHEMA_CHECKED])
    assert dev.wait_run(run_id, timeout=600) == "SUCCESS"
    for name in ["image_set", "keypoints", "image_pairs", "correspondences"]:
        assert (storage / "tables" / f"{name}.parquet").stat().st_size > 0
    return instance


@pytest.fixture(scope="module")
def settled(launched):
    """`launched`'s instance once the daemon's own runs after the data (the tables automation derives from
    the data alone: LVLM items, sample hashes) have finished, so that a new spec meets an idle daemon:
    under load those runs shared the cores with the spec's chain."""
    instance = launched
    busy = dg.RunsFilter(
        statuses=[dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED]
    )

    def idle() -> bool:
        return all(_materialized(instance, k) for k in DERIVED_FROM_DATA) and not instance.get_runs(busy)

    deadline = time.time() + 300
    while not idle() and time.time() < deadline:
        time.sleep(1)
    assert idle(), f"the daemon's runs after the data ({', '.join(DERIVED_FROM_DATA)}) did not end in 300 s"
    return instance


@pytest.fixture(scope="module")
def spec_added(server, settled):
    """A backbone spec copied into the watched folder once the daemon is idle, and the partition the backbone
    sensor (running by default) adds for it: one per spec file. Returns the instance."""
    _dev, _storage, _home, tmp = server
    instance = settled
    assert instance.get_dynamic_partitions("backbones") == []
    for b in BACKBONES:
        shutil.copy(PROJECT_ROOT / "assets" / "backbones" / f"{b}.yaml", tmp / "backbones" / f"{b}.yaml")
    deadline = time.time() + 120
    while set(instance.get_dynamic_partitions("backbones")) != set(BACKBONES) and time.time() < deadline:
        time.sleep(1)
    assert set(instance.get_dynamic_partitions("backbones")) == set(BACKBONES)
    return instance


def _wait_materialized(
    instance: dg.DagsterInstance, keys: list[tuple[str, str | None]], timeout: float
) -> None:
    """Until every (asset, partition) of `keys` is materialized; TimeoutError naming them after `timeout`."""
    names = ", ".join(f"{k}[{p}]" if p else k for k, p in keys)

    def done() -> bool:
        return all(_materialized(instance, k, p) for k, p in keys)

    wait_for(f"{names} materialized by automation", done, timeout, interval=1.0)


def test_a_new_spec_gets_its_partition_and_automation_builds_its_tables(server, spec_added):
    """Eager automation takes the new partition from there: the per-backbone assets, in one run."""
    _dev, storage, _home, _tmp = server
    instance = spec_added
    _wait_materialized(instance, [("metrics", b) for b in BACKBONES], 600)
    for b in BACKBONES:
        assert (storage / "tables" / "metrics" / f"{b}.parquet").exists()
        # one mechanism only: each backbone's features were computed by exactly one run
        assert len(materializations(instance, "feature_manifest", b)) == 1


@pytest.fixture(scope="module")
def chain_built(spec_added):
    """`spec_added`'s instance once automation has materialized every new backbone's metrics."""
    _wait_materialized(spec_added, [("metrics", b) for b in BACKBONES], 600)
    return spec_added


def test_the_boards_and_sql_views_follow_the_new_backbone(server, chain_built):
    """After the per-backbone chain, automation rebuilds the boards and the SQL views, each chain table
    materialized once and no run failed on the way."""
    _dev, storage, _home, _tmp = server
    instance = chain_built
    _wait_materialized(instance, [("results_database", None)], 600)
    assert (storage / "tables" / "leaderboard.parquet").exists()
    # the board the UI shows on the leaderboard's page: its latest materialization's markdown table
    board = instance.get_latest_materialization_event(dg.AssetKey("leaderboard")).asset_materialization
    assert all(f"| {b} " in board.metadata["leaderboard"].value for b in BACKBONES)
    for b in BACKBONES:
        # metrics once: ON_CHANGE shared its stored state with the weekly trigger's, and under load requested
        # metrics again while the chain's run was still going (tests/test_automation_state.py)
        assert len(materializations(instance, "metrics", b)) == 1
        assert len(materializations(instance, "feature_manifest", b)) == 1
    # and no run of the chain failed on the way (a board requested before its tables did, under load)
    failed = instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE]))
    assert not failed, [
        (r.run_id, sorted(k.to_user_string() for k in r.asset_selection or [])) for r in failed
    ]


def test_the_ui_shows_the_asset_graph_and_a_table_s_metadata(server, launched):
    """Headless Chromium on the running UI (skipped without Debian's chromium; a failure under CI=true): the
    asset graph draws the leaderboard node, and a table's page renders its markdown metadata as a table."""
    need(CHROMIUM.exists(), "Debian's chromium")
    from playwright.sync_api import sync_playwright

    dev, _storage, _home, tmp = server
    shot = (
        tmp / "screenshots" / "ui_correspondences.png"
    )  # under the test's temporary folder, not the checkout
    shot.parent.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=str(CHROMIUM),
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        # Dagster's first-visit community dialog can open at any moment and cover the page: dismiss it
        # whenever it appears, before each action (Playwright's locator handler).
        page.add_locator_handler(
            page.get_by_role("button", name="Skip"), lambda skip: skip.click(), no_wait_after=True
        )
        # The asset graph of the backbones group shows the leaderboard node.
        page.goto(f"{dev.url}/locations/soco_pipeline/asset-groups/backbones", wait_until="networkidle")
        # The graph opens at full scale around its first nodes and draws only what is in view: zoom out (the
        # graph's own zoom-out button) until the leaderboard node comes into view.
        node = page.get_by_text("leaderboard", exact=True).first
        zoom_out = page.get_by_role("img", name="zoom_out").first
        zoom_out.wait_for(timeout=60_000)
        for _ in range(10):
            if node.is_visible():
                break
            zoom_out.click()
            page.wait_for_timeout(500)
        for _ in range(
            2
        ):  # zooming out about the centre pulls the node in from the edge, under the page header
            zoom_out.click()
            page.wait_for_timeout(500)
        node.wait_for(timeout=30_000)
        page.screenshot(path=str(shot.with_name("ui_asset_graph.png")))
        page.goto(f"{dev.url}/assets/correspondences", wait_until="networkidle")
        # The latest materialization's metadata: the pair counts' markdown rendered as a table. A long markdown
        # value (a board with its CI columns) sits behind Dagster's "Show Markdown" button: open the first.
        table = page.locator("table:has-text('soc_geo')").first
        try:
            table.wait_for(timeout=15_000)
        except Exception:
            page.get_by_text("Show Markdown").first.click()
            table.wait_for(timeout=60_000)
        table.scroll_into_view_if_needed()
        assert {"level", "kind", "evaluated", "soc_geo"} <= set(table.inner_text().split())
        page.screenshot(path=str(shot), full_page=True)
        browser.close()
    assert shot.stat().st_size > 10_000
