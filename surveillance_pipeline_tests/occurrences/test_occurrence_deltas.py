"""A changed input applied record by record: the partition ends as a full reload of the input leaves it."""

import threading
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
from psycopg import sql

from surveillance_pipeline.core.fingerprints import partition_fingerprint
from surveillance_pipeline.core.keys import sha256_hex
from surveillance_pipeline.core.line_digests import DERIVED_CSV_LINES, read_kept_lines
from surveillance_pipeline.core.refresh import ensure_state_tables
from surveillance_pipeline.gbif.registry import species_by_slug
from surveillance_pipeline.occurrences import load
from surveillance_pipeline_tests.support.pipeline import DEVIL, state_row, table_md5

pytestmark = [pytest.mark.db]
DEVIL_SPECIES = species_by_slug(DEVIL)
HEADER = "id,year,longitude,latitude,license\n"
LICENSES = ("CC0 1.0", "CC BY 4.0", "CC BY-NC 4.0")


def _row(record: int, moved: float = 0.0, year: int | None = None) -> str:
    if record % 11 == 0:
        return f"{record},{year or ''},,,\n"  # no coordinates, no license
    longitude, latitude = 146.0 + record / 1000, -42.0 - record / 2000 + moved
    return f"{record},{year or 1950 + record % 70},{longitude:.4f},{latitude:.4f},{LICENSES[record % 3]}\n"


def _csv(records: dict[int, str]) -> bytes:
    return (HEADER + "".join(records[key] for key in sorted(records))).encode()


BASE = {record: _row(record) for record in range(1, 201)}


def _month_later() -> dict[int, str]:
    later = dict(BASE)
    for record in (3, 4, 5):
        later[record] = _row(record, moved=0.01)  # coordinates corrected
    later[22] = _row(22, year=1801)  # a record without coordinates, its year edited
    later[41] = _row(41).replace("CC BY-NC 4.0", "CC BY 4.0")  # relicensed
    for record in (7, 8, 9):
        del later[record]
    for record in (1000, 1001, 1002, 1100):
        later[record] = _row(record)
    return later


def _load(db, derived: bytes, run_id: str, rules: load.OccurrenceRules | None = None, kept_lines=None):
    return load.load_occurrences(
        db,
        species=DEVIL_SPECIES,
        derived=derived,
        rules=rules or load.OccurrenceRules(),
        run_id=run_id,
        kept_lines=kept_lines,
    )


def _held(db):
    """What a verification would compare: the state row's fingerprint, and the partition's recomputed."""
    digest = db.execute(
        "SELECT rows, digest FROM target_state WHERE target = 'occurrences' AND partition_key = %s", [DEVIL]
    ).fetchone()
    found = partition_fingerprint(db, load.OCCURRENCES, str(DEVIL_SPECIES.species_id))
    return digest, (found.rows, found.digest)


def _full_reload(db, derived: bytes, run_id: str):
    """The same input loaded whole: with its state row forgotten the partition has no fingerprint to carry
    forward, so the load replaces its rows (replace_rows) and compares no record."""
    db.execute("DELETE FROM target_state WHERE target = 'occurrences' AND partition_key = %s", [DEVIL])
    outcome = _load(db, derived, run_id)
    assert (outcome.action, outcome.changes) == ("loaded", None)
    return outcome


def test_a_changed_input_is_applied_by_its_changed_records_and_ends_as_a_full_reload(db):
    ensure_state_tables(db)
    first = _load(db, _csv(BASE), "r0")
    assert (first.action, first.changes) == ("loaded", None)
    xmins = dict(db.execute("SELECT id, xmin::text FROM occurrences").fetchall())

    later = _load(db, _csv(_month_later()), "r1")
    assert (later.action, later.reason) == ("loaded", "input changed")
    assert later.changes is not None and later.changes.applied
    assert (later.changes.added, later.changes.changed, later.changes.removed, later.changes.rows) == (
        4,
        5,
        3,
        201,
    )
    assert later.rows == 201
    # Only the changed and added records were written: every other row is the one the first load wrote.
    untouched = dict(db.execute("SELECT id, xmin::text FROM occurrences").fetchall())
    rewritten = {record for record in untouched if untouched[record] != xmins.get(record)}
    assert rewritten == {3, 4, 5, 22, 41, 1000, 1001, 1002, 1100}
    provenance = db.execute(
        "SELECT reason, detail FROM provenance WHERE run_id = 'r1' AND asset = 'occurrences'"
    ).fetchone()
    assert provenance == (
        "input changed",
        {"changes": {"added": 4, "changed": 5, "removed": 3, "rows": 201, "applied": True}},
    )
    recorded, found = _held(db)
    assert recorded == found  # the fingerprint carried forward is the rows' own
    by_delta = (table_md5(db, DEVIL_SPECIES.species_id), state_row(db), recorded)

    _full_reload(db, _csv(_month_later()), "r2")
    assert (table_md5(db, DEVIL_SPECIES.species_id), state_row(db), _held(db)[0]) == by_delta
    assert db.execute("SELECT count(*) FROM target_edits").fetchone() == (0,)


def test_a_delta_from_the_kept_lines_copies_in_only_the_changed_ones_and_ends_as_a_full_reload(db, tmp_path):
    """Each load keeps its derived file's line digests; the next delta, whose held rows were made from that
    file, copies in only the lines that changed and names the gone records, and ends as a full reload (and
    as the delta that compared every row); back to the first input, the same rows as the first load."""
    ensure_state_tables(db)
    memo = tmp_path / "lines.bin"
    first = _load(db, _csv(BASE), "r0", kept_lines=memo)
    before = (table_md5(db, DEVIL_SPECIES.species_id), _held(db))
    kept = read_kept_lines(memo, source_sha256=first.parts["input"], kind=DERIVED_CSV_LINES)
    assert kept is not None and kept.ids.tolist() == sorted(BASE)

    later = _csv(_month_later())
    with db.transaction(force_rollback=True):
        load.copy_incoming(db, DEVIL_SPECIES, later, sha256_hex(later), kept)
        copied = [row[0] for row in db.execute("SELECT id FROM incoming_occurrences ORDER BY id").fetchall()]
        assert copied == [3, 4, 5, 22, 41, 1000, 1001, 1002, 1100]
        candidates = db.execute(
            sql.SQL("SELECT id FROM {} ORDER BY id").format(sql.Identifier(load.OCCURRENCE_CANDIDATES))
        ).fetchall()
        assert [row[0] for row in candidates] == [3, 4, 5, 7, 8, 9, 22, 41, 1000, 1001, 1002, 1100]
    outcome = _load(db, later, "r1", kept_lines=memo)
    assert outcome.changes is not None and outcome.changes.applied
    assert (outcome.changes.added, outcome.changes.changed, outcome.changes.removed) == (4, 5, 3)
    recorded, found = _held(db)
    assert recorded == found
    by_delta = (table_md5(db, DEVIL_SPECIES.species_id), state_row(db), recorded)
    _full_reload(db, later, "r2")
    assert (table_md5(db, DEVIL_SPECIES.species_id), state_row(db), _held(db)[0]) == by_delta

    # The memo the delta kept names the month-later file: back to the first input by its lines.
    back = _load(db, _csv(BASE), "r3", kept_lines=memo)
    assert back.changes is not None and back.changes.total == 12
    assert (table_md5(db, DEVIL_SPECIES.species_id), _held(db)) == before

    # A gbifID on two lines, one of them unchanged: never applied by the changed lines alone; the full
    # reload refuses it at the partition's primary key, and the partition keeps its rows.
    twice = _csv(BASE) + _row(7).encode()
    with pytest.raises(psycopg.errors.UniqueViolation):
        _load(db, twice, "r4", kept_lines=memo)
    db.rollback()
    assert (table_md5(db, DEVIL_SPECIES.species_id), _held(db)) == before


def test_a_return_to_the_earlier_input_is_a_delta_back_to_the_same_rows(db):
    ensure_state_tables(db)
    first = _load(db, _csv(BASE), "r0")
    before = (table_md5(db, DEVIL_SPECIES.species_id), _held(db))
    _load(db, _csv(_month_later()), "r1")
    back = _load(db, _csv(BASE), "r2")
    assert back.changes is not None
    assert (back.changes.added, back.changes.changed, back.changes.removed, back.changes.applied) == (
        3,
        5,
        4,
        True,
    )
    assert back.job_key == first.job_key
    assert (table_md5(db, DEVIL_SPECIES.species_id), _held(db)) == before
    assert _load(db, _csv(BASE), "r3").action == "skipped"


def test_a_delta_too_large_to_pay_reloads_whole_and_says_so(db):
    ensure_state_tables(db)
    _load(db, _csv(BASE), "r0")
    moved = {record: _row(record, moved=0.5 if record <= 80 else 0.0) for record in BASE}
    outcome = _load(db, _csv(moved), "r1")
    assert outcome.changes is not None and not outcome.changes.applied
    assert outcome.changes.describe() == "reloaded: delta too large (0 added, 73 changed, 0 removed of 200)"
    by_reload = (table_md5(db, DEVIL_SPECIES.species_id), state_row(db), _held(db))
    assert by_reload[2][0] == by_reload[2][1]
    _full_reload(db, _csv(moved), "r2")
    assert (table_md5(db, DEVIL_SPECIES.species_id), state_row(db), _held(db)) == by_reload


def test_a_delta_from_the_kept_lines_found_too_large_is_counted_before_its_rows_are_made(
    db, tmp_path, monkeypatch
):
    """With the kept lines, a delta past the limit is counted from the changed lines alone, no row made
    (apply_record_delta not reached), to the counts and rows the comparison of rows gives: under a license
    filter too, where a changed line takes a record out of the kept rows or into them."""
    ensure_state_tables(db)
    rules = load.OccurrenceRules(licenses=("CC0 1.0", "CC BY 4.0"))
    moved = {record: _row(record, moved=0.5 if record <= 80 else 0.0) for record in BASE}
    for record in (91, 93, 94):  # CC BY 4.0 or CC0 1.0 before: out of the kept rows now
        moved[record] = _row(record).replace(LICENSES[record % 3], "CC BY-NC 4.0")
    for record in (92, 98):  # CC BY-NC 4.0 before (not kept): into them now
        moved[record] = _row(record).replace("CC BY-NC 4.0", "CC0 1.0")
    del moved[100]
    memo = tmp_path / "lines.bin"

    def compared_rows(*args, **kwargs):
        raise AssertionError("the delta made and compared its rows")

    described = []
    for kept_lines in (memo, None):
        _load(db, _csv(BASE), "r0", rules, kept_lines=kept_lines)
        with monkeypatch.context() as patched:
            if kept_lines is not None:
                patched.setattr(load, "apply_record_delta", compared_rows)
            outcome = _load(db, _csv(moved), "r1", rules, kept_lines=kept_lines)
        assert outcome.changes is not None and not outcome.changes.applied
        described.append((outcome.changes.describe(), table_md5(db, DEVIL_SPECIES.species_id), _held(db)))
        db.execute("DELETE FROM target_state WHERE target = 'occurrences' AND partition_key = %s", [DEVIL])
    assert described[0] == described[1]
    assert described[0][0] == "reloaded: delta too large (2 added, 49 changed, 4 removed of 137)"


def test_a_config_change_or_an_edit_outside_the_pipeline_reloads_whole(db):
    ensure_state_tables(db)
    _load(db, _csv(BASE), "r0")
    reconfigured = _load(db, _csv(_month_later()), "r1", load.OccurrenceRules(licenses=("CC0 1.0",)))
    assert (reconfigured.reason, reconfigured.changes) == ("input and config changed", None)
    assert (
        reconfigured.rows
        == db.execute(
            "SELECT count(*) FROM occurrences WHERE license = 'CC0 1.0' OR license IS NULL"
        ).fetchone()[0]
    )
    _load(db, _csv(BASE), "r2")
    db.execute("UPDATE occurrences SET year = 1700 WHERE id = 100")
    edited = _load(db, _csv(_month_later()), "r3")
    assert edited.changes is None
    assert db.execute("SELECT year FROM occurrences WHERE id = 100").fetchone() == (1980,)
    recorded, found = _held(db)
    assert recorded == found


def test_two_species_whose_deltas_do_not_pay_reload_at_once_without_a_deadlock(db, database_url, monkeypatch):
    """A delta found too large is rolled back before the full reload, its locks with it: two species'
    loads, each past its delta attempt at once (a barrier holds both there), then both swapping their
    partition, end loaded. Kept until COMMIT, the lock the attempt's table (made LIKE the parent) took on
    ``occurrences`` made each swap's DROP wait for the other's: PostgreSQL's deadlock error for one."""
    ensure_state_tables(db)
    species = (DEVIL_SPECIES, species_by_slug("thylacinus-cynocephalus"))
    for each in species:
        load.load_occurrences(db, species=each, derived=_csv(BASE), rules=load.OccurrenceRules(), run_id="r0")
    moved = _csv({record: _row(record, moved=0.5) for record in BASE})
    both_tried = threading.Barrier(len(species), timeout=60)
    tried = load.apply_record_delta

    def tried_then_wait(*args, **kwargs):
        delta = tried(*args, **kwargs)
        both_tried.wait()
        return delta

    monkeypatch.setattr(load, "apply_record_delta", tried_then_wait)

    def reload(each) -> str:
        with psycopg.connect(database_url, autocommit=True) as conn:
            outcome = load.load_occurrences(
                conn, species=each, derived=moved, rules=load.OccurrenceRules(), run_id="r1"
            )
            assert outcome.changes is not None
            return outcome.changes.describe()

    with ThreadPoolExecutor(max_workers=len(species)) as pool:
        described = list(pool.map(reload, species))
    assert described == ["reloaded: delta too large (0 added, 182 changed, 0 removed of 200)"] * 2
    for each in species:
        rows = db.execute(
            "SELECT count(*) FROM occurrences WHERE species_id = %s AND latitude > -42", [each.species_id]
        ).fetchone()
        assert rows == (182,)
