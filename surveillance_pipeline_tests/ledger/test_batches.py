"""Daily batches through the batch ledger: a backfill twice gives the same table; a correction, its rows."""

import dagster as dg
import pytest

from surveillance_pipeline.core.errors import InputError
from surveillance_pipeline.definitions import assemble
from surveillance_pipeline.lab.batches import lab_batch_days, write_lab_batches
from surveillance_pipeline.ledger.assets import occurrence_batches
from surveillance_pipeline.ledger.feed import read_batch
from surveillance_pipeline.orchestration.partitions import add_batch_days
from surveillance_pipeline.orchestration.reporting import partition_range_tags
from surveillance_pipeline_tests.support.pipeline import resources

pytestmark = pytest.mark.db
FEED_MD5 = (
    "SELECT count(*), md5(string_agg(concat_ws('|', id, species_slug, year, longitude, latitude, license,"
    " ST_AsEWKT(geom), batch_date), E'\\n' ORDER BY id)) FROM occurrence_feed"
)


@pytest.fixture()
def instance():
    with dg.instance_for_test() as instance:
        yield instance


def _backfill(instance, database_url, data_dir):
    days = add_batch_days(instance, lab_batch_days())
    job = assemble(resources(database_url, data_dir)).resolve_job_def("batch_days")
    result = job.execute_in_process(instance=instance, tags=partition_range_tags(days[0], days[-1]))
    assert result.success
    return {
        m.partition: {k: v.value for k, v in m.metadata.items()}
        for m in result.asset_materializations_for_node("occurrence_batches")
    }


def test_backfilling_every_day_twice_leaves_the_same_table(db, database_url, data_dir, instance):
    write_lab_batches(data_dir)
    first = _backfill(instance, database_url, data_dir)
    assert sorted(first) == lab_batch_days()
    assert {meta["action"] for meta in first.values()} == {"loaded"}
    table = db.execute(FEED_MD5).fetchone()
    assert table[0] == sum(meta["rows"] for meta in first.values())
    ledger = db.execute("SELECT count(*) FROM batch_ledger WHERE target = 'occurrence_feed'").fetchone()
    assert ledger == (len(lab_batch_days()),)

    second = _backfill(instance, database_url, data_dir)
    assert {(meta["action"], meta["reason"]) for meta in second.values()} == {
        ("skipped", "batch already applied")
    }
    assert db.execute(FEED_MD5).fetchone() == table
    for day, meta in second.items():
        record = instance.get_latest_data_version_record(occurrence_batches.key, partition_key=day)
        assert record.asset_materialization.tags["dagster/data_version"] == meta["job_key_parts"]["input"]


def test_a_corrected_batch_changes_exactly_the_corrected_rows(db, database_url, data_dir, instance):
    write_lab_batches(data_dir)
    _backfill(instance, database_url, data_dir)
    xmin_before = dict(db.execute("SELECT id, xmin::text FROM occurrence_feed").fetchall())
    day = lab_batch_days()[4]
    path = data_dir / "batches" / f"{day}.csv"
    lines = path.read_text().splitlines()
    corrected_ids = []
    for index in (3, 9):
        fields = lines[index].split(",")
        fields[2] = "1999"
        lines[index] = ",".join(fields)
        corrected_ids.append(int(fields[0]))
    path.write_text("\n".join(lines) + "\n")

    result = dg.materialize(
        [occurrence_batches],
        instance=instance,
        partition_key=day,
        resources=resources(database_url, data_dir),
    )
    meta = result.asset_materializations_for_node("occurrence_batches")[0].metadata
    assert (meta["action"].value, meta["reason"].value, meta["rows"].value) == ("loaded", "new batch", 2)
    xmin_after = dict(db.execute("SELECT id, xmin::text FROM occurrence_feed").fetchall())
    changed = sorted(i for i in xmin_after if xmin_after[i] != xmin_before[i])
    assert changed == sorted(corrected_ids)
    years = db.execute(
        "SELECT DISTINCT year FROM occurrence_feed WHERE id = ANY(%s)", [corrected_ids]
    ).fetchall()
    assert years == [(1999,)]


@pytest.mark.parametrize(
    ("name", "content", "where", "field"),
    [
        ("2026-02-30.csv", b"id,species,year,longitude,latitude,license\n", "file name", None),
        ("2026-10-02.csv", b"", "line 1", None),
        (
            "2026-10-02.csv",
            b"id,species,year,longitude,latitude,license\n1,sarcophilus-harrisii,2000\n",
            "line 2",
            None,
        ),
        (
            "2026-10-02.csv",
            b"id,species,year,longitude,latitude,license\n1,felis-leo,2000,147,-42,CC0 1.0\n",
            "line 2",
            "species",
        ),
        (
            "2026-10-02.csv",
            b"id,species,year,longitude,latitude,license\n1,sarcophilus-harrisii,2000,147,-91,\n",
            "line 2",
            "latitude",
        ),
        (
            "2026-10-02.csv",
            b"id,species,year,longitude,latitude,license\n1,sarcophilus-harrisii,2000,nan,-42,\n",
            "line 2",
            "longitude",
        ),
        (
            "2026-10-02.csv",
            b"id,species,year,longitude,latitude,license\n1,sarcophilus-harrisii,,147,-42,\n"
            b"1,sarcophilus-harrisii,,147,-42,\n",
            "line 3",
            "id",
        ),
    ],
)
def test_a_bad_batch_is_named_and_changes_nothing(
    db, database_url, data_dir, instance, name, content, where, field
):
    write_lab_batches(data_dir)
    _backfill(instance, database_url, data_dir)
    before = (db.execute(FEED_MD5).fetchone(), db.execute("SELECT count(*) FROM batch_ledger").fetchone())
    path = data_dir / "batches" / name
    path.write_bytes(content)
    with pytest.raises(InputError) as error:
        read_batch(path)
    assert (error.value.where, error.value.field) == (where, field)
    if name == "2026-10-02.csv":
        add_batch_days(instance, [path.stem])
        with pytest.raises(InputError):
            dg.materialize(
                [occurrence_batches],
                instance=instance,
                partition_key="2026-10-02",
                resources=resources(database_url, data_dir),
            )
    after = (db.execute(FEED_MD5).fetchone(), db.execute("SELECT count(*) FROM batch_ledger").fetchone())
    assert after == before
