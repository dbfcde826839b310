"""A target holds what its state row says, or the next run makes it so.

Each test loads make run's plan (the first species of the registry, as test_every_asset_idempotent does)
into a fresh warehouse, keeps every table's rows (md5 in key order) and every file's sha256, then edits
the tables the way users' tools do, from a connection of their own: psql's UPDATE, DELETE and TRUNCATE,
COPY of extra rows, a table dropped and made again, an older dump restored by pg_dump and psql, and edits
made while the triggers were disabled. What is checked:

- the asset checks (the verify_targets job) fail naming exactly the partitions that were edited, with the
  rows expected and found, and pass after the repair; what they find stands (noted as an edit) until a
  run reloads it, and the sensor report_noted_edits reports it on the checks meanwhile;
- the next run reloads exactly those partitions, with a reason of their own, and nothing else;
- afterwards every table and file equals the untouched warehouse's, byte for byte;
- a run after that skips everything and leaves the tables as they were (no edit noted, no row rewritten).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import dagster as dg
import psycopg
import pytest

from surveillance_pipeline.core.fingerprints import EDITED_OUTSIDE, FOUND_BY_VERIFICATION, verify_target
from surveillance_pipeline.definitions import assemble, table_targets
from surveillance_pipeline.gbif.registry import partition_keys, species_by_slug
from surveillance_pipeline.lab.deliveries import delivery_a
from surveillance_pipeline.occurrences.assets import occurrences
from surveillance_pipeline.orchestration.resources import Warehouse
from surveillance_pipeline.orchestration.verification import NOTED_EDITS_SENSOR, VERIFY_JOB
from surveillance_pipeline.planning.plan import make_plan
from surveillance_pipeline.planning.sync_checks import SYNC_CHECK, SYNC_SENSOR
from surveillance_pipeline.snapshots.devil import DEVIL_SLUG
from surveillance_pipeline_tests.support.file_digests import file_hashes
from surveillance_pipeline_tests.support.pipeline import (
    SPECIES_COUNT,
    TEST_SEED_KEY,
    execute_as_launched,
    resources,
    rows_md5,
    run_everything,
)

pytestmark = [pytest.mark.db, pytest.mark.dagster]

TARGET_TABLES = [table.target.name for table in table_targets()]
SPECIES = partition_keys()[:SPECIES_COUNT]


def outputs(database_url: str, root: Path) -> dict[str, Any]:
    """Every target table's rows and every file under data/, as bytes' digests."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        tables = {table: rows_md5(conn, table) for table in TARGET_TABLES}
    return {"tables": tables, "files": file_hashes(root)}


def run_ids_since(conn: psycopg.Connection, previous: set[str]) -> set[str]:
    return {row[0] for row in conn.execute("SELECT DISTINCT run_id FROM provenance")} - previous


def reloads(conn: psycopg.Connection, run_ids: set[str]) -> dict[tuple[str, str], str]:
    """(asset, partition) -> reason of every partition the runs loaded."""
    rows = conn.execute(
        "SELECT asset, partition_key, reason FROM provenance WHERE run_id = ANY(%s) AND action = 'loaded'",
        [list(run_ids)],
    ).fetchall()
    return {(asset, partition): reason for asset, partition, reason in rows}


def check_results(defs: dg.Definitions, instance: dg.DagsterInstance) -> dict[str, tuple[bool, str]]:
    """Run the verify_targets job; per table, whether its check passed and the description it gave."""
    run = execute_as_launched(instance, defs.resolve_job_def(VERIFY_JOB))
    assert run.status == dg.DagsterRunStatus.SUCCESS
    records = instance.get_records_for_run(
        run.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION
    ).records
    results = {}
    for record in records:
        event = record.event_log_entry.dagster_event
        assert event is not None
        evaluation = event.event_specific_data
        table = evaluation.metadata["table"].value
        results[table] = (evaluation.passed, evaluation.description or "")
    assert sorted(results) == sorted(TARGET_TABLES)
    return results


class LoadedWarehouse:
    """The loaded warehouse of one test, with what it held untouched."""

    def __init__(self, database_url: str, root: Path, instance: dg.DagsterInstance) -> None:
        self.url, self.root, self.instance = database_url, root, instance
        self.defs = assemble(resources(database_url, root))
        self.conn = psycopg.connect(database_url, autocommit=True)
        self.runs: set[str] = set()
        self.run()
        self.untouched = outputs(database_url, root)

    def run(self, defs: dg.Definitions | None = None) -> dict[tuple[str, str], str]:
        """make run's plan; the partitions it loaded, with their reasons."""
        run_everything(defs or self.defs, self.instance, self.root)
        new = run_ids_since(self.conn, self.runs)
        self.runs |= new
        return reloads(self.conn, new)

    def edit(self, *statements: str) -> None:
        """Statements from a client of the user's own (psql), each in its own transaction."""
        with psycopg.connect(self.url, autocommit=True) as user:
            for statement in statements:
                user.execute(statement)  # type: ignore[arg-type]

    def species_id(self, slug: str) -> int:
        return species_by_slug(slug).species_id

    def assert_untouched(self) -> None:
        assert outputs(self.url, self.root) == self.untouched
        for target in (table.target for table in table_targets()):
            assert all(v.holds for v in verify_target(self.conn, target)), target.name
        assert self.conn.execute("SELECT count(*) FROM target_edits").fetchone() == (0,)

    def assert_next_run_skips_everything(self) -> None:
        xmins = self.row_versions()
        assert self.run() == {}
        assert self.row_versions() == xmins, "a run that skips rewrote rows"
        assert outputs(self.url, self.root) == self.untouched

    def row_versions(self) -> dict[str, str]:
        """md5 of every target table's (ctid, xmin): any row written anew changes it."""
        versions = {}
        for table in TARGET_TABLES:
            row = self.conn.execute(
                f"SELECT md5(string_agg(ctid::text || xmin::text, ',' ORDER BY ctid)) FROM {table}"  # noqa: S608
            ).fetchone()
            versions[table] = row[0] if row else ""
        return versions


@pytest.fixture()
def warehouse(db, database_url, postgres_instance, tmp_path) -> LoadedWarehouse:
    return LoadedWarehouse(database_url, tmp_path / "data", postgres_instance)


def test_edits_of_every_kind_the_watch_notes_are_repaired_byte_identical(warehouse: LoadedWarehouse) -> None:
    first, second, third, fourth = SPECIES[0], SPECIES[1], SPECIES[2], SPECIES[3]
    geocoded = warehouse.conn.execute(
        "SELECT species_id FROM geocoded_localities GROUP BY 1 ORDER BY count(*) DESC, 1 LIMIT 1"
    ).fetchone()
    assert geocoded is not None
    geocoded_slug = next(s for s in SPECIES if warehouse.species_id(s) == geocoded[0])
    first_id, second_id, third_id, fourth_id = (
        warehouse.species_id(s) for s in (first, second, third, fourth)
    )
    warehouse.edit(
        # psql UPDATE of one value
        "UPDATE occurrences SET year = 1800 WHERE id = "
        f"(SELECT min(id) FROM occurrences WHERE species_id = {first_id})",
        # DELETE of some rows, and of a whole species
        "DELETE FROM region_assignment WHERE id IN "
        f"(SELECT id FROM region_assignment WHERE species_id = {second_id} ORDER BY id LIMIT 3)",
        f"DELETE FROM geocoded_localities WHERE species_id = {geocoded[0]}",
        # an UPDATE addressed to a species' own partition table, and one to the whole-target tables
        f"UPDATE occurrences_{third_id} SET license = NULL "
        f"WHERE id = (SELECT max(id) FROM occurrences_{third_id})",
        "UPDATE regions SET name = upper(name)",
        # TRUNCATE of a whole table, and of one species' own partition table (that species alone)
        "TRUNCATE occurrence_sample",
        f"TRUNCATE occurrences_{fourth_id}",
    )
    # COPY of extra rows
    with psycopg.connect(warehouse.url, autocommit=True) as user:
        with user.cursor().copy("COPY devil_snapshot (id, year, license, pick) FROM STDIN") as copy:
            copy.write_row((1, 2000, "CC0 1.0", 999_999))
        with user.cursor().copy("COPY occurrence_feed (id, species_slug, batch_date) FROM STDIN") as copy:
            copy.write_row((1, first, "2026-11-01"))

    edited = {
        ("occurrences", first),
        ("occurrences", third),
        ("occurrences", fourth),
        ("region_assignment", second),
        ("geocoded_localities", geocoded_slug),
        ("regions", "all"),
        ("devil_snapshot", "all"),
        ("occurrence_feed", "all"),
        *(("occurrence_sample", slug) for slug in SPECIES),
    }
    checks = check_results(warehouse.defs, warehouse.instance)
    assert {table for table, (passed, _) in checks.items() if not passed} == {t for t, _ in edited}
    for table, partition in edited:
        assert partition in checks[table][1], (table, partition, checks[table][1])
    assert f"1 of {len(SPECIES)} partitions" in checks["region_assignment"][1]
    assert checks["occurrence_sample"][1].startswith(f"{len(SPECIES)} of {len(SPECIES)} partitions")

    reloaded = warehouse.run()
    assert set(reloaded) == edited
    assert reloaded[("occurrences", first)] == f"{EDITED_OUTSIDE} (UPDATE)"
    assert reloaded[("region_assignment", second)] == f"{EDITED_OUTSIDE} (DELETE)"
    assert reloaded[("occurrence_sample", first)] == f"{EDITED_OUTSIDE} (TRUNCATE)"
    assert reloaded[("occurrences", fourth)] == f"{EDITED_OUTSIDE} (TRUNCATE)"
    assert reloaded[("devil_snapshot", "all")] == f"{EDITED_OUTSIDE} (INSERT)"
    warehouse.assert_untouched()
    assert all(passed for passed, _ in check_results(warehouse.defs, warehouse.instance).values())
    warehouse.assert_next_run_skips_everything()


def test_a_table_dropped_and_made_again_empty_is_rebuilt_and_reloaded(warehouse: LoadedWarehouse) -> None:
    third_id = warehouse.species_id(SPECIES[2])
    warehouse.edit(
        # Made again by hand with the same columns, and without the pipeline's triggers or indexes.
        "CREATE TABLE region_assignment_copy (LIKE region_assignment)",
        "DROP TABLE region_assignment",
        "ALTER TABLE region_assignment_copy RENAME TO region_assignment",
        # One species' partition of occurrences dropped on its own: no statement on any row.
        f"DROP TABLE occurrences_{third_id}",
    )
    checks = check_results(warehouse.defs, warehouse.instance)
    assert {t for t, (passed, _) in checks.items() if not passed} == {"region_assignment", "occurrences"}

    # The checks noted what they found; the run adds what it sees itself (the table made again).
    reloaded = warehouse.run()
    assert set(reloaded) == {("region_assignment", s) for s in SPECIES} | {("occurrences", SPECIES[2])}
    assert {reloaded[("region_assignment", s)] for s in SPECIES} == {
        f"{EDITED_OUTSIDE} ({FOUND_BY_VERIFICATION}, table dropped or replaced)"
    }
    assert reloaded[("occurrences", SPECIES[2])] == f"{EDITED_OUTSIDE} ({FOUND_BY_VERIFICATION})"
    warehouse.assert_untouched()
    warehouse.assert_next_run_skips_everything()


def test_an_older_dump_restored_over_a_table_is_reloaded(warehouse: LoadedWarehouse) -> None:
    """pg_dump of devil_snapshot while it held delivery A, restored by psql after it loaded a later one."""
    dump = warehouse.root.parent / "devil_snapshot_a.sql"
    subprocess.run(  # noqa: S603
        [
            "pg_dump",
            "--clean",
            "--if-exists",
            "--table",
            "devil_snapshot",
            "--file",
            str(dump),
            warehouse.url,
        ],
        check=True,
    )
    # A later delivery in which every year moved: every row of the snapshot differs from A's.
    lines = delivery_a().decode("utf-8").splitlines()
    later = [lines[0]] + [
        ",".join([i, str(int(y) + 1) if y else y, lic])
        for i, y, lic in (line.split(",") for line in lines[1:])
    ]
    (warehouse.root / "deliveries" / DEVIL_SLUG / "2026-11-09.csv").write_text("\n".join(later) + "\n")
    assert warehouse.run()[("devil_snapshot", "all")] == "input changed"
    holding_later = outputs(warehouse.url, warehouse.root)

    subprocess.run(  # noqa: S603
        ["psql", "--quiet", "--set", "ON_ERROR_STOP=1", "--file", str(dump), warehouse.url],
        check=True,
        capture_output=True,
    )
    restored = outputs(warehouse.url, warehouse.root)["tables"]["devil_snapshot"]
    assert restored == warehouse.untouched["tables"]["devil_snapshot"], "the dump brought back A's rows"
    passed, description = check_results(warehouse.defs, warehouse.instance)["devil_snapshot"]
    assert not passed and "1 of 1 partitions" in description

    reloaded = warehouse.run()
    assert set(reloaded) == {("devil_snapshot", "all")}
    assert reloaded[("devil_snapshot", "all")] == (
        f"{EDITED_OUTSIDE} ({FOUND_BY_VERIFICATION}, table dropped or replaced)"
    )
    assert outputs(warehouse.url, warehouse.root) == holding_later


def unseen_update(species_id: int) -> tuple[str, ...]:
    """An UPDATE of one species' occurrences no trigger sees, as a restore with pg_restore
    --disable-triggers leaves it: the triggers are back, the edit unseen."""
    table = f"occurrences_{species_id}"
    return (
        f"ALTER TABLE {table} DISABLE TRIGGER USER",
        f"UPDATE {table} SET year = 1801 WHERE id = (SELECT min(id) FROM {table})",
        f"ALTER TABLE {table} ENABLE TRIGGER USER",
    )


def test_edits_no_trigger_saw_are_found_by_the_checks_and_repaired_by_the_next_run(
    warehouse: LoadedWarehouse,
) -> None:
    first_id = warehouse.species_id(SPECIES[0])
    warehouse.edit(
        *unseen_update(first_id),
        "ALTER TABLE region_assignment DISABLE TRIGGER USER",
        "DELETE FROM region_assignment WHERE id = "
        f"(SELECT min(id) FROM region_assignment WHERE species_id = {first_id})",
        "ALTER TABLE region_assignment ENABLE TRIGGER USER",
        # These triggers stay disabled: the run sees that the watch is off, and fingerprints the partitions.
        "ALTER TABLE geocoded_localities DISABLE TRIGGER USER",
        "UPDATE geocoded_localities SET status = status",
    )
    assert warehouse.conn.execute("SELECT count(*) FROM target_edits").fetchone() == (0,)
    checks = check_results(warehouse.defs, warehouse.instance)
    failing = {t for t, (passed, _) in checks.items() if not passed}
    assert failing == {"occurrences", "region_assignment"}
    assert (
        SPECIES[0] in checks["occurrences"][1] and "found by the fingerprint" not in checks["occurrences"][1]
    )

    # What the checks found stands: the plan names it, the sensor reports it on the checks (again after a
    # newer materialization), and the next ordinary run repairs it with that reason.
    noted = f"{EDITED_OUTSIDE} ({FOUND_BY_VERIFICATION})"
    bound = resources(warehouse.url, warehouse.root)
    planned = make_plan(
        warehouse.conn,
        bound["paths"],
        bound["geocoder"],
        [species_by_slug(SPECIES[0])],
        masking_key_id=TEST_SEED_KEY.id,
    )
    assert planned.steps["occurrences"][SPECIES[0]].reason == noted
    assert planned.steps["region_assignment"][SPECIES[0]].reason == noted
    reported, cursor = sensor_reports(warehouse, NOTED_EDITS_SENSOR, None)
    assert {name for name, (passed, _) in reported.items() if not passed} == {
        "occurrences/holds_its_snapshot",
        "region_assignment/holds_its_snapshot",
    }
    assert SPECIES[0] in reported["occurrences/holds_its_snapshot"][1]
    assert sensor_reports(warehouse, NOTED_EDITS_SENSOR, cursor)[0] == {}, (
        "nothing new: nothing reported again"
    )

    reloaded = warehouse.run()
    assert reloaded == {("occurrences", SPECIES[0]): noted, ("region_assignment", SPECIES[0]): noted}
    # The run put the watch back where it was off.
    assert warehouse.conn.execute(
        "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'geocoded_localities'::regclass AND tgenabled = 'D'"
    ).fetchone() == (0,)
    reported, _ = sensor_reports(warehouse, NOTED_EDITS_SENSOR, cursor)
    assert reported == {
        "occurrences/holds_its_snapshot": (True, reported["occurrences/holds_its_snapshot"][1]),
        "region_assignment/holds_its_snapshot": (True, reported["region_assignment/holds_its_snapshot"][1]),
    }
    warehouse.assert_untouched()
    warehouse.assert_next_run_skips_everything()


def test_edits_no_trigger_saw_and_no_check_found_are_repaired_by_a_verifying_run(
    warehouse: LoadedWarehouse,
) -> None:
    warehouse.edit(*unseen_update(warehouse.species_id(SPECIES[0])))
    # The ordinary run cannot know (its skip reads no row); make repair compares every skip's rows.
    assert warehouse.run() == {}
    verifying = assemble(
        {
            **resources(warehouse.url, warehouse.root),
            "warehouse": Warehouse(database_url=warehouse.url, verify_targets=True),
        }
    )
    reloaded = warehouse.run(verifying)
    assert set(reloaded) == {("occurrences", SPECIES[0])}
    assert reloaded[("occurrences", SPECIES[0])].startswith(f"{EDITED_OUTSIDE} (found by its fingerprint: ")
    warehouse.assert_untouched()
    warehouse.assert_next_run_skips_everything()


def sensor_reports(
    warehouse: LoadedWarehouse, sensor_name: str, cursor: str | None
) -> tuple[dict[str, tuple[bool, str]], str | None]:
    """One tick of a sensor that reports check evaluations: per "asset/check" it reported, (passed,
    description), and its new cursor. It launches nothing."""
    sensor = warehouse.defs.get_sensor_def(sensor_name)
    context = dg.build_sensor_context(
        instance=warehouse.instance, cursor=cursor, resources=resources(warehouse.url, warehouse.root)
    )
    result = sensor(context)
    assert isinstance(result, dg.SensorResult) and not result.run_requests
    reported = {
        f"{event.asset_key.to_user_string()}/{event.check_name}": (event.passed, event.description or "")
        for event in result.asset_events
        if isinstance(event, dg.AssetCheckEvaluation)
    }
    return reported, result.cursor


def sync_reports(
    warehouse: LoadedWarehouse, cursor: str | None
) -> tuple[dict[str, tuple[bool, str]], str | None]:
    """report_partitions_in_sync's tick, by asset."""
    reported, cursor = sensor_reports(warehouse, SYNC_SENSOR, cursor)
    return {name.removesuffix(f"/{SYNC_CHECK}"): found for name, found in reported.items()}, cursor


def test_a_partition_loaded_with_other_config_shows_unsynced_on_each_asset_it_reaches(
    warehouse: LoadedWarehouse,
) -> None:
    first = SPECIES[0]
    _, cursor = sync_reports(warehouse, None)
    # One species of occurrences loaded by hand with other config, as from the launchpad.
    dg.materialize(
        [occurrences],
        instance=warehouse.instance,
        partition_key=first,
        resources=resources(warehouse.url, warehouse.root),
        run_config={"ops": {"occurrences": {"config": {"require_coordinates": True}}}},
    )
    reported, cursor = sync_reports(warehouse, cursor)
    assert f"{first} (config changed)" in reported["occurrences"][1]
    for reader in ("occurrence_sample", "masked_release", "region_assignment", "occurrence_quality"):
        passed, description = reported[reader]
        assert not passed and f"{first} (input changed" in description, (reader, description)
        assert "Materialize" in description and "or `make run`." in description
    # The next run loads them back to the configured snapshot: the checks no longer name that species.
    warehouse.run()
    reported, _ = sync_reports(warehouse, cursor)
    assert all(first not in description for _, description in reported.values()), reported


def test_the_sync_check_says_one_partition_in_the_singular_and_lists_missing_after_unsynced() -> None:
    from surveillance_pipeline.planning.sync_checks import sync_result

    one = sync_result("masked_release", [("sarcophilus-harrisii", "input changed (after occurrences)")])
    assert not one["passed"]
    assert one["description"] == (
        "1 partition would load on the next run; 1 unsynced or edited: sarcophilus-harrisii (input changed "
        "(after occurrences)). Launch it: Materialize masked_release (or its job species_assets) with the "
        "partition sarcophilus-harrisii, or `make run`."
    )
    two = sync_result("occurrences", [("b", "first load"), ("a", "config changed")])
    assert two["description"].startswith(
        "2 partitions would load on the next run; 1 unsynced or edited: a (config changed); "
        "1 missing (never loaded): b. Launch them: Materialize occurrences (or its job species_assets) with "
        "the partitions b,a"
    ), two["description"]
    assert sync_result("occurrences", [])["passed"]
