"""The refresh transaction's first statement: a skip commits without waiting for its WAL flush, a load
waits, a refresh inside its caller's transaction leaves the caller's commit as it was, and a connection
that verifies every skip fingerprints the partition instead of trusting its watch. A skip's provenance row
alone commits unflushed too, and leaves the session's setting as it was."""

import psycopg
import pytest

from surveillance_pipeline.core.fingerprints import EDITED_OUTSIDE, VERIFY_SETTING
from surveillance_pipeline.core.keys import advisory_lock_id
from surveillance_pipeline.core.refresh import (
    LOADED,
    NOTHING_CHANGED,
    SKIPPED,
    RefreshOutcome,
    ensure_state_tables,
    record_provenance,
    refresh_partition,
)
from surveillance_pipeline.places.geocoded import GEOCODED_LOCALITIES

pytestmark = pytest.mark.db

SPECIES_ID = 7


class _Refresh:
    """refresh_partition of one partition of geocoded_localities, noting synchronous_commit where each
    callback runs: ``parts`` runs in every refresh once the first statement ran, ``replace_rows`` only
    in a load."""

    def __init__(self) -> None:
        self.at_parts: list[str] = []
        self.at_load: list[str] = []

    def __call__(self, conn: psycopg.Connection, input_checksum: str = "a"):
        def parts(connection: psycopg.Connection):
            self.at_parts.append(_synchronous_commit(connection))
            return GEOCODED_LOCALITIES.key_parts(input_checksum, {})

        def replace_rows(connection: psycopg.Connection) -> int:
            self.at_load.append(_synchronous_commit(connection))
            return 0

        return refresh_partition(
            conn,
            target=GEOCODED_LOCALITIES,
            partition_key="devil",
            parts=parts,
            replace_rows=replace_rows,
            run_id="run",
            partition_value=SPECIES_ID,
        )


def _synchronous_commit(conn: psycopg.Connection) -> str:
    row = conn.execute("SHOW synchronous_commit").fetchone()
    assert row is not None
    return str(row[0])


def test_a_skip_commits_without_waiting_for_its_wal_flush_and_a_load_waits(db):
    ensure_state_tables(db)
    refresh = _Refresh()
    assert refresh(db).action == LOADED
    skipped = refresh(db)
    assert (skipped.action, skipped.reason) == (SKIPPED, NOTHING_CHANGED)
    assert refresh(db, input_checksum="b").action == LOADED
    # Off from the first statement on; a load turns the wait back on before it writes a row.
    assert refresh.at_parts == ["off", "off", "off"]
    assert refresh.at_load == ["on", "on"]
    # Local to each transaction: the session keeps its own.
    assert _synchronous_commit(db) == "on"


def test_a_refresh_inside_its_callers_transaction_leaves_the_callers_commit_as_it_was(db):
    ensure_state_tables(db)
    refresh = _Refresh()
    with db.transaction():
        assert refresh(db).action == LOADED
        assert refresh(db).action == SKIPPED
        assert _synchronous_commit(db) == "on"
    assert refresh.at_parts == ["on", "on"]


def test_a_connection_that_verifies_every_skip_fingerprints_the_partition(db, database_url):
    ensure_state_tables(db)
    refresh = _Refresh()
    assert refresh(db).action == LOADED
    # A row written behind the watch's back (its triggers off meanwhile, then on again): a plain skip
    # trusts the watch, a verifying one counts the rows and reloads.
    with db.transaction():
        db.execute("ALTER TABLE geocoded_localities DISABLE TRIGGER USER")
        db.execute(
            "INSERT INTO geocoded_localities (id, species_id, status) VALUES (1, %s, 'not_found')",
            [SPECIES_ID],
        )
        db.execute("ALTER TABLE geocoded_localities ENABLE TRIGGER USER")
    assert refresh(db).action == SKIPPED
    with psycopg.connect(database_url, autocommit=True, options=f"-c {VERIFY_SETTING}=on") as verifying:
        repaired = refresh(verifying)
    assert repaired.action == LOADED
    assert repaired.reason.startswith(EDITED_OUTSIDE)


def test_a_skips_provenance_row_alone_leaves_the_sessions_setting_and_a_transactions_as_they_were(db):
    """A skip's row outside any transaction is one statement that turns the wait off for its own implicit
    transaction only (that its commit then does not wait is timed, not tested: 0.5 ms against 4 ms here):
    the session's setting, and a transaction's, are left as they were."""
    ensure_state_tables(db)
    skipped = RefreshOutcome(SKIPPED, NOTHING_CHANGED, "key", {}, 3)
    loaded = RefreshOutcome(LOADED, "first load", "key", {}, 3)
    ids = [record_provenance(db, run_id="run", asset="a", partition_key="p", outcome=skipped)]
    assert _synchronous_commit(db) == "on"
    with db.transaction():
        ids.append(record_provenance(db, run_id="run", asset="a", partition_key="p", outcome=skipped))
        assert _synchronous_commit(db) == "on"
    ids.append(record_provenance(db, run_id="run", asset="a", partition_key="p", outcome=loaded))
    assert _synchronous_commit(db) == "on"
    rows = db.execute("SELECT id, action FROM provenance WHERE run_id = 'run' ORDER BY id").fetchall()
    assert rows == [(ids[0], SKIPPED), (ids[1], SKIPPED), (ids[2], LOADED)]


def _refresh_known(conn: psycopg.Connection, input_checksum: str = "a", *, likely: bool = False):
    """refresh_partition with its key known before any lock: the parts themselves, or (``likely``) a
    callable with the same parts as its caller's guess."""
    parts = GEOCODED_LOCALITIES.key_parts(input_checksum, {})
    return refresh_partition(
        conn,
        target=GEOCODED_LOCALITIES,
        partition_key="devil",
        parts=(lambda connection: parts) if likely else parts,
        replace_rows=_replace_with_one_row,
        run_id="run",
        partition_value=SPECIES_ID,
        likely_parts=parts if likely else None,
    )


def _replace_with_one_row(connection: psycopg.Connection) -> int:
    connection.execute("DELETE FROM geocoded_localities WHERE species_id = %s", [SPECIES_ID])
    return connection.execute(
        "INSERT INTO geocoded_localities (id, species_id, status) VALUES (1, %s, 'not_found')", [SPECIES_ID]
    ).rowcount


def _provenance(conn: psycopg.Connection) -> list[tuple]:
    return conn.execute(
        "SELECT action, reason, job_key, parts, rows, detail, worker FROM provenance "
        "WHERE asset = 'geocoded_localities' ORDER BY id"
    ).fetchall()


@pytest.mark.parametrize("likely", [False, True], ids=["parts", "likely_parts"])
def test_a_skip_whose_key_is_known_takes_no_lock_and_records_what_the_transaction_would(
    db, database_url, likely
):
    """A known key's skip is one statement: it passes a load in flight (its partition's lock held), and
    its provenance row is the one the refresh transaction writes for a skip (here inside a caller's
    transaction, where the one statement cannot be used)."""
    ensure_state_tables(db)
    assert _refresh_known(db, likely=likely).action == LOADED
    with db.transaction():
        in_transaction = _refresh_known(db, likely=likely)
    with psycopg.connect(database_url, autocommit=True) as other, other.transaction():
        other.execute("SELECT pg_advisory_xact_lock(%s)", [advisory_lock_id("geocoded_localities", "devil")])
        db.execute("SET lock_timeout = '2s'")  # the transaction's path would wait for the lock, then fail
        alone = _refresh_known(db, likely=likely)
    db.execute("RESET lock_timeout")
    assert alone == in_transaction
    assert (alone.action, alone.reason, alone.rows, alone.previous_key) == (
        SKIPPED,
        NOTHING_CHANGED,
        1,
        alone.job_key,
    )
    loaded, *skips = _provenance(db)
    assert loaded[0] == LOADED
    assert skips[0] == skips[1]
    assert skips[1][:5] == (SKIPPED, NOTHING_CHANGED, alone.job_key, alone.parts, 1)
    assert _synchronous_commit(db) == "on"


def test_a_known_key_not_plainly_held_takes_the_transactions_path(db, database_url):
    """Each thing the refresh transaction checks before a skip sends a known key there: another key held,
    an edit noted, a watch switched off, a connection that verifies every skip."""
    ensure_state_tables(db)
    assert _refresh_known(db).action == LOADED
    changed = _refresh_known(db, input_checksum="b")
    assert (changed.action, changed.reason) == (LOADED, "input changed")
    db.execute("DELETE FROM geocoded_localities WHERE species_id = %s", [SPECIES_ID])
    repaired = _refresh_known(db, input_checksum="b")
    assert (repaired.action, repaired.reason) == (LOADED, f"{EDITED_OUTSIDE} (DELETE)")
    # A watch switched off can have missed an edit: the rows are fingerprinted (they are intact), and the
    # watch is put back, so the next skip is the one statement again.
    db.execute("ALTER TABLE geocoded_localities DISABLE TRIGGER USER")
    assert _refresh_known(db, input_checksum="b").action == SKIPPED
    assert _watch_triggers_enabled(db) == 4
    db.execute("ALTER TABLE geocoded_localities DISABLE TRIGGER USER")
    db.execute("UPDATE geocoded_localities SET id = id + 1 WHERE species_id = %s", [SPECIES_ID])
    edited = _refresh_known(db, input_checksum="b")
    assert (edited.action, edited.reason.startswith(EDITED_OUTSIDE)) == (LOADED, True)
    with psycopg.connect(database_url, autocommit=True) as editor, editor.transaction():
        editor.execute("ALTER TABLE geocoded_localities DISABLE TRIGGER USER")
        editor.execute("UPDATE geocoded_localities SET id = id + 1 WHERE species_id = %s", [SPECIES_ID])
        editor.execute("ALTER TABLE geocoded_localities ENABLE TRIGGER USER")
    assert _refresh_known(db, input_checksum="b").action == SKIPPED  # the watch saw nothing: trusted
    with psycopg.connect(database_url, autocommit=True, options=f"-c {VERIFY_SETTING}=on") as verifying:
        verified = _refresh_known(verifying, input_checksum="b")
    assert (verified.action, verified.reason.startswith(EDITED_OUTSIDE)) == (LOADED, True)


def _watch_triggers_enabled(conn: psycopg.Connection) -> int:
    row = conn.execute(
        "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'geocoded_localities'::regclass "
        "AND tgname LIKE 'surveillance\\_watch\\_%%' AND tgenabled <> 'D'"
    ).fetchone()
    assert row is not None
    return int(row[0])
