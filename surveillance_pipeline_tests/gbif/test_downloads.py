"""GBIF downloads (DwC-A and simple CSV) read by meta.xml, derived by the same rules, loaded into occurrences.

The real downloads are read from ../shared/data/gbif/ in place; constructed archives are written to tmp_path.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import threading
import zipfile
from pathlib import Path

import dagster as dg
import pytest

from surveillance_pipeline.commands.run import _ChildRuns, chosen_weigher, species_weights, weighing_plan
from surveillance_pipeline.commands.species_weights import ForkedWeights, plan_from_settings
from surveillance_pipeline.core.data_folder import DataFolder
from surveillance_pipeline.core.errors import InputError
from surveillance_pipeline.core.keys import forget_hashed_files, sha256_file
from surveillance_pipeline.core.partition_files import file_stamp, read_file_stamps, write_file_stamps
from surveillance_pipeline.core.refresh import ensure_state_tables
from surveillance_pipeline.definitions import assemble, live_resources
from surveillance_pipeline.gbif.download_index import DownloadIndex, ensure_index, open_downloads
from surveillance_pipeline.gbif.downloads import (
    DWCA,
    SIMPLE_CSV,
    describe_download,
    downloads_version,
    read_records,
)
from surveillance_pipeline.gbif.ingest import ingest_species_from_downloads
from surveillance_pipeline.gbif.licenses import CC_BY, CC_BY_NC, normalize_license
from surveillance_pipeline.gbif.raw_snapshots import RECORDS_SUFFIX, read_raw_snapshot
from surveillance_pipeline.gbif.records import record_from_fields
from surveillance_pipeline.gbif.registry import (
    DOWNLOAD_ENDPOINT,
    load_registry,
    partition_keys,
    species_by_slug,
)
from surveillance_pipeline.lab.resources import LabGbifSource
from surveillance_pipeline.occurrences import assets as occurrence_assets
from surveillance_pipeline.occurrences.assets import gbif_downloads, gbif_raw
from surveillance_pipeline.occurrences.derive import DerivedFile, derive_to_file
from surveillance_pipeline.occurrences.load import OccurrenceRules, load_occurrences
from surveillance_pipeline.orchestration import run_settings
from surveillance_pipeline.orchestration.reporting import partition_range_tags
from surveillance_pipeline.orchestration.resources import Warehouse
from surveillance_pipeline.places.assets import geocoded_localities, region_assignment
from surveillance_pipeline.planning.plan import SKIPPED, make_plan
from surveillance_pipeline_tests.support.pipeline import (
    DEVIL,
    SPINE,
    TEST_SEED_KEY,
    metadata,
    observe,
    resources,
    table_md5,
)

DWCA_ZIP = "gbif/dwca-0000066-elevation/0000066-140928181241064.zip"
SIMPLE_ZIP = "gbif/simplecsv-0009886-delphinium/0009886-250127130748423.zip"
DEVIL_SPECIES = species_by_slug(DEVIL)


def every_record(path: Path) -> list[dict]:
    """Every record of a download, as occurrence-search records, in file order (small files only)."""
    return [
        record_from_fields(r.text.rstrip("\n").split("\t")) for r in read_records(describe_download(path))
    ]


def index_of(path: Path, root: Path, registry) -> DownloadIndex:
    return ensure_index(describe_download(path), root / "index", list(registry))


@pytest.fixture()
def instance():
    with dg.instance_for_test() as instance:
        yield instance


def test_the_shared_dwca_is_read_by_its_meta_xml(shared_data, tmp_path):
    download = describe_download(shared_data / DWCA_ZIP)
    assert (download.format, download.key, download.doi) == (DWCA, "0000066-140928181241064", None)
    assert download.query == '{"type":"equals","key":"ELEVATION","value":"9500"}'
    assert download.created == "2014-09-28T18:12:41Z"  # read off the key: the raw snapshot's time
    index = index_of(shared_data / DWCA_ZIP, tmp_path, [])
    # The figures PROVENANCE.md gives for occurrence.txt.
    assert index.counts == {
        "above_species_rank": 161,
        "no_coordinates": 325,
        "no_license": 470,
        "records": 470,
        "zero_coordinates": 32,
    }
    assert index.licenses == {"none": 470}
    records = every_record(shared_data / DWCA_ZIP)
    names = {record.get("scientificName") for record in records}
    assert "Caloplaca arenaria (Pers.) Müll. Arg." in names
    years = [r["year"] for r in records if "year" in r]
    assert (len(years), min(years), max(years)) == (381, 1853, 1997)


def test_the_shared_simple_csv_is_read_and_its_licenses_normalize_like_uris(shared_data, tmp_path):
    download = describe_download(shared_data / SIMPLE_ZIP)
    assert (download.format, download.key, download.query) == (SIMPLE_CSV, "0009886-250127130748423", None)
    assert download.created == "2025-01-27T13:07:48Z"
    index = index_of(shared_data / SIMPLE_ZIP, tmp_path, [])
    assert index.counts == {
        "above_species_rank": 0,
        "no_coordinates": 8,
        "no_license": 0,
        "records": 91,
        "zero_coordinates": 0,
    }
    assert index.licenses == {CC_BY: 32, CC_BY_NC: 59}
    # A simple CSV says CC_BY_NC_4_0 where a DwC-A or the API says the URI: the same short name.
    assert normalize_license("CC_BY_NC_4_0") == normalize_license(
        "http://creativecommons.org/licenses/by-nc/4.0/legalcode"
    )


def _delphinium():
    """A registry-shaped species for the simple CSV's one species (the lab registry is Tasmanian)."""
    return dataclasses.replace(
        DEVIL_SPECIES,
        species_id=9001,
        slug="delphinium-fissum",
        scientific_name="Delphinium fissum",
        vernacular_name="",
        taxon_key=None,
        # No area: the whole download's records of the taxon, as a search without country would give.
        country="",
        state_province="",
    )


@pytest.mark.db
def test_a_shared_download_lands_in_occurrences_and_a_second_import_is_skipped(
    db, database_url, shared_data, tmp_path
):
    ensure_state_tables(db)
    species = _delphinium()
    indexes = [index_of(shared_data / name, tmp_path, [species]) for name in (SIMPLE_ZIP, DWCA_ZIP)]
    raw = tmp_path / "raw" / f"{species.slug}.json"
    first = ingest_species_from_downloads(indexes, species, raw)
    assert first is not None and (first.written, first.records) == (True, 91)
    snapshot = read_raw_snapshot(raw)
    assert snapshot.request["endpoint"] == DOWNLOAD_ENDPOINT
    # Only the download that held the species is named: the DwC-A has no Delphinium.
    assert [d["key"] for d in snapshot.request["downloads"]] == ["0009886-250127130748423"]
    # Same downloads, same bytes: the time is when GBIF made the download, never the clock.
    assert snapshot.retrieved == "2025-01-27T13:07:48Z"
    derived_path = tmp_path / "derived.csv"
    derive_to_file(raw, species, derived_path)
    loaded = load_occurrences(
        db, species=species, derived=derived_path, rules=OccurrenceRules(), run_id="download-test"
    )
    assert (loaded.action, loaded.rows) == ("loaded", 91)
    licenses = db.execute(
        "SELECT license, count(*) FROM occurrences WHERE species_id = %s GROUP BY license ORDER BY license",
        [species.species_id],
    ).fetchall()
    assert licenses == [(CC_BY, 32), (CC_BY_NC, 59)]
    assert db.execute(
        "SELECT count(*), count(geom) FROM occurrences WHERE species_id = %s", [species.species_id]
    ).fetchone() == (91, 83)
    before = table_md5(db, species.species_id)

    again = ingest_species_from_downloads(indexes, species, raw)
    assert again is not None
    assert (again.written, again.reason, again.file_sha256) == (False, "nothing changed", first.file_sha256)
    derive_to_file(raw, species, derived_path)
    reload = load_occurrences(
        db, species=species, derived=derived_path, rules=OccurrenceRules(), run_id="download-test-2"
    )
    assert reload.action == "skipped"
    assert table_md5(db, species.species_id) == before


def derive_occurrences_from(raw: Path, species):
    """The derived CSV of a header snapshot, in memory (small test species only)."""
    target = raw.with_suffix(".csv")
    streamed = derive_to_file(raw, species, target)
    return DerivedFile(target.read_bytes(), streamed.rows, streamed.counts)


@pytest.mark.db
def test_dwca_zero_coordinates_and_empty_licenses_keep_the_record_without_geometry(db, shared_data, tmp_path):
    ensure_state_tables(db)
    species = dataclasses.replace(
        DEVIL_SPECIES,
        species_id=9002,
        slug="bombus-rufocinctus",
        scientific_name="Bombus rufocinctus",
        country="",
        state_province="",
    )
    raw = tmp_path / "bombus.json"
    ingest_species_from_downloads([index_of(shared_data / DWCA_ZIP, tmp_path, [species])], species, raw)
    derived = derive_occurrences_from(raw, species)
    zero = sum(
        1
        for r in every_record(shared_data / DWCA_ZIP)
        if r.get("species") == "Bombus rufocinctus" and "ZERO_COORDINATE" in r.get("issues", ())
    )
    assert (derived.rows, derived.counts["no_license"], derived.counts["zero_coordinates"]) == (27, 27, zero)
    load_occurrences(db, species=species, derived=derived.data, rules=OccurrenceRules(), run_id="t")
    rows, with_geom, licensed, at_origin = db.execute(
        "SELECT count(*), count(geom), count(license),"
        " count(*) FILTER (WHERE ST_X(geom) = 0 AND ST_Y(geom) = 0)"
        " FROM occurrences WHERE species_id = %s",
        [species.species_id],
    ).fetchone()
    assert (rows, licensed, at_origin) == (27, 0, 0)
    assert with_geom == 27 - derived.counts["no_coordinates"] - zero


# A constructed DwC-A: columns in an order no GBIF download uses, quoted fields with an embedded tab and
# quote, a constant column given by meta.xml's default, a BOM, diacritics, an empty license, a 0,0 record,
# a record above species rank.
META_XML = """<archive xmlns="http://rs.tdwg.org/dwc/text/" metadata="metadata.xml">
  <core encoding="UTF-8" fieldsTerminatedBy="\\t" linesTerminatedBy="\\n" fieldsEnclosedBy="&quot;"
        ignoreHeaderLines="1" rowType="http://rs.tdwg.org/dwc/terms/Occurrence">
    <files><location>occurrence.txt</location></files>
    <id index="3"/>
    <field index="0" term="http://rs.tdwg.org/dwc/terms/decimalLongitude"/>
    <field index="1" term="http://rs.tdwg.org/dwc/terms/locality"/>
    <field index="2" term="http://purl.org/dc/terms/license"/>
    <field index="3" term="http://rs.gbif.org/terms/1.0/gbifID"/>
    <field index="4" term="http://rs.tdwg.org/dwc/terms/species"/>
    <field index="5" term="http://rs.tdwg.org/dwc/terms/decimalLatitude"/>
    <field index="6" term="http://rs.tdwg.org/dwc/terms/year"/>
    <field index="7" term="http://rs.gbif.org/terms/1.0/issue"/>
    <field term="http://rs.tdwg.org/dwc/terms/countryCode" default="AU"/>
    <field term="http://rs.tdwg.org/dwc/terms/stateProvince" default="Tasmania"/>
  </core>
</archive>
"""
METADATA_XML = """<eml:eml xmlns:eml="eml://ecoinformatics.org/eml-2.1.1"><dataset>
<alternateIdentifier>10.15468/dl.test01</alternateIdentifier>
<abstract><para>A dataset containing all occurrences available in GBIF matching the query: \
{"type":"equals","key":"TAXON_KEY","value":"2433"}&lt;br/&gt;The dataset includes records from ...</para>
</abstract></dataset><additionalMetadata><metadata><gbif>
<citation identifier="0001234-261129000000000">GBIF Occurrence Download</citation>
</gbif></metadata></additionalMetadata></eml:eml>
"""
HEADER = "decimalLongitude\tlocality\tlicense\tgbifID\tspecies\tdecimalLatitude\tyear\tissue\n"
DEVIL_ROWS = [
    '147.3\t"Mount\tField, ""the"" ridge"\thttp://creativecommons.org/licenses/by/4.0/legalcode\t'
    "5001\tSarcophilus harrisii\t-42.7\t2019\t\n",
    "146.1\tCradle Mountain–Lake St Clair\t\t5002\tSarcophilus harrisii\t-41.6\t\t\n",
    "0\tSomewhere\tCC_BY_NC_4_0\t5003\tSarcophilus harrisii\t0\t2001\tZERO_COORDINATE\n",
    "145.9\tStrahan\tCC0_1_0\t5004\t\t-42.1\t2003\tTAXON_MATCH_HIGHERRANK\n",
]


def _write_dwca(path: Path, rows: list[str], meta: str = META_XML) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("meta.xml", meta)
        archive.writestr("metadata.xml", METADATA_XML)
        archive.writestr("occurrence.txt", ("\ufeff" + HEADER + "".join(rows)).encode("utf-8"))
    return path


def test_a_constructed_dwca_is_read_by_term_not_by_position(tmp_path):
    path = _write_dwca(tmp_path / "0001234-261129000000000.zip", DEVIL_ROWS)
    download = describe_download(path)
    assert (download.key, download.doi) == ("0001234-261129000000000", "10.15468/dl.test01")
    assert download.query == '{"type":"equals","key":"TAXON_KEY","value":"2433"}'
    first, second, zero, genus = every_record(path)
    assert first == {
        "key": 5001,
        "countryCode": "AU",
        "stateProvince": "Tasmania",
        "decimalLatitude": -42.7,
        "decimalLongitude": 147.3,
        "license": "http://creativecommons.org/licenses/by/4.0/legalcode",
        "locality": 'Mount\tField, "the" ridge',
        "species": "Sarcophilus harrisii",
        "year": 2019,
    }
    assert second["locality"] == "Cradle Mountain–Lake St Clair" and "license" not in second
    assert zero["issues"] == ["ZERO_COORDINATE"]
    assert "species" not in genus
    assert index_of(path, tmp_path, [DEVIL_SPECIES]).counts == {
        "above_species_rank": 1,
        "no_coordinates": 0,
        "no_license": 1,
        "records": 4,
        "zero_coordinates": 1,
    }


BAD_ROWS = {
    "non-numeric gbifID": ("1.5\tx\t\tabc\tSarcophilus harrisii\t-42\t2001\t\n", "line 2", "gbifID"),
    "latitude 91": ("147\tx\t\t6001\tSarcophilus harrisii\t91\t2001\t\n", "line 2", "decimalLatitude"),
    "longitude NaN": ("NaN\tx\t\t6001\tSarcophilus harrisii\t-42\t2001\t\n", "line 2", "decimalLongitude"),
    "year not a number": ("147\tx\t\t6001\tSarcophilus harrisii\t-42\t20x1\t\n", "line 2", "year"),
    "unknown license": ("147\tx\tGPL-3\t6001\tSarcophilus harrisii\t-42\t2001\t\n", "line 2", "license"),
    "too few fields": ("147\tx\t\t6001\n", "line 2", None),
    "duplicate gbifID": (DEVIL_ROWS[0] + DEVIL_ROWS[0], "line 3", "gbifID"),
}


@pytest.mark.parametrize("case", sorted(BAD_ROWS))
def test_a_bad_download_row_is_refused_naming_zip_member_line_and_term(tmp_path, case):
    row, where, field = BAD_ROWS[case]
    path = _write_dwca(tmp_path / "bad.zip", [row])
    with pytest.raises(InputError) as caught:
        index_of(path, tmp_path, [DEVIL_SPECIES])
    assert caught.value.path == str(path)
    assert caught.value.where == f"occurrence.txt {where}"
    assert caught.value.field == field


def test_a_gbif_id_given_twice_is_found_whichever_batch_and_bucket_holds_it(tmp_path, monkeypatch):
    # The columnar reader checks ids spread over bucket files on disk: a repeat in a later write, or
    # several ids in one bucket that are not repeats, must each be told apart.
    import numpy as np

    from surveillance_pipeline.gbif import download_index

    monkeypatch.setattr(download_index, "KEY_BUFFER", 3)
    buckets = download_index._KeyBuckets(tmp_path / "keys")
    for ids in ([1, 65, 2], [3, 4], [129, 5, 193]):  # 1, 65, 129, 193: one bucket of 64
        buckets.add(np.array(ids, dtype=np.int64))
    assert not buckets.any_repeated()
    assert len(list((tmp_path / "keys").iterdir())) == 5  # buckets 1 to 5
    buckets.add(np.array([7, 129], dtype=np.int64))  # written by any_repeated, in a write of its own
    assert buckets.any_repeated()


def test_a_zip_that_is_no_gbif_download_is_refused(tmp_path):
    path = tmp_path / "holiday-photos.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("a.jpg", b"\xff\xd8")
    with pytest.raises(InputError, match="neither a Darwin Core Archive"):
        describe_download(path)
    path.write_bytes(b"not a zip")
    with pytest.raises(InputError, match="not a readable zip"):
        describe_download(path)


def _download_resources(database_url: str, data_dir: Path) -> dict:
    """The test resources with ingest reading data/downloads/ (GBIF_SOURCE=download)."""
    return {**resources(database_url, data_dir), "gbif": LabGbifSource(source="download", fallback="lab")}


def _write_dwca_of(path: Path, rows: list[str], key: str, query: str) -> Path:
    """A DwC-A whose metadata names its own key (and so its creation time) and query."""
    path.parent.mkdir(parents=True, exist_ok=True)
    metadata_xml = METADATA_XML.replace("0001234-261129000000000", key).replace(
        '{"type":"equals","key":"TAXON_KEY","value":"2433"}', query
    )
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("meta.xml", META_XML)
        archive.writestr("metadata.xml", metadata_xml)
        archive.writestr("occurrence.txt", ("\ufeff" + HEADER + "".join(rows)).encode("utf-8"))
    return path


def _raw_from_alone(database_url: str, data_dir: Path, zips: list[Path], partition: str) -> Path:
    """gbif_raw of one partition in a data folder holding only ``zips``, under another Dagster instance:
    that folder, whose raw snapshots a refresh's must equal."""
    alone = data_dir.parent / "alone"
    (alone / "downloads").mkdir(parents=True)
    for path in zips:
        shutil.copyfile(path, alone / "downloads" / path.name)
    with dg.instance_for_test() as other_instance:
        resources = _download_resources(database_url, alone)
        dg.materialize([gbif_raw], instance=other_instance, partition_key=partition, resources=resources)
    return alone


def _devil_ids(db) -> list[int]:
    return [row[0] for row in db.execute("SELECT id FROM occurrences ORDER BY id").fetchall()]


@pytest.mark.db
@pytest.mark.dagster
def test_a_newer_download_of_the_same_query_supersedes_the_older_and_its_gone_records_go(
    db, database_url, data_dir, instance
):
    """A user keeps each month's download: the newer of one query is read alone, so a record GBIF no
    longer has leaves occurrences; a download of another query still adds up; taking the newer away
    gives the older's records back; a species the newer download lacks and did not ask for is searched."""
    resources = _download_resources(database_url, data_dir)
    downloads = data_dir / "downloads"
    taxon = '{"type":"equals","key":"TAXON_KEY","value":"2433"}'
    area = '{"type":"equals","key":"STATE_PROVINCE","value":"Tasmania"}'
    gone = (
        "147.0\tBicheno\thttp://creativecommons.org/licenses/by/4.0/legalcode\t"
        "5009\tSarcophilus harrisii\t-41.9\t2018\t\n"
    )
    other = "146.5\tTarraleah\tCC0_1_0\t5010\tSarcophilus harrisii\t-42.3\t2020\t\n"
    _write_dwca_of(downloads / "november.zip", [*DEVIL_ROWS[:2], gone], "0001234-261101000000000", taxon)
    _write_dwca_of(downloads / "by-area.zip", [other], "0004321-261115000000000", area)
    dg.materialize(SPINE, instance=instance, partition_key=DEVIL, resources=resources)
    assert _devil_ids(db) == [5001, 5002, 5009, 5010]

    # December's download of the same query no longer has 5009.
    _write_dwca_of(downloads / "december.zip", DEVIL_ROWS[:2], "0002345-261201000000000", taxon)
    run = dg.materialize(SPINE, instance=instance, partition_key=DEVIL, resources=resources)
    assert _devil_ids(db) == [5001, 5002, 5010]
    raw = metadata(run, "gbif_raw")
    assert raw["action"] == "loaded"
    assert raw["reason"].endswith("newer download 0002345-261201000000000 of the same query")
    assert raw["records_gone"] == 1
    request = read_raw_snapshot(data_dir / "raw" / f"{DEVIL}.json").request
    assert [d["key"] for d in request["downloads"]] == ["0004321-261115000000000", "0002345-261201000000000"]
    # November is not read, so not named: the raw snapshot is the one December alone gives.
    assert "superseded" not in request
    again = dg.materialize(SPINE, instance=instance, partition_key=DEVIL, resources=resources)
    assert metadata(again, "gbif_raw")["action"] == "skipped"
    alone = _raw_from_alone(
        database_url, data_dir, [downloads / "december.zip", downloads / "by-area.zip"], DEVIL
    )
    assert (alone / "raw" / f"{DEVIL}.json").read_bytes() == (data_dir / "raw" / f"{DEVIL}.json").read_bytes()

    # December's taken away: November is the newest of its query again, and 5009 is back.
    (downloads / "december.zip").unlink()
    dg.materialize(SPINE, instance=instance, partition_key=DEVIL, resources=resources)
    assert _devil_ids(db) == [5001, 5002, 5009, 5010]

    # A newer download of each query without the devil, whose query did not ask for it (the registry
    # names the devil without a backbone key): the devil is searched, as a folder holding it alone would.
    shutil.move(downloads / "november.zip", data_dir / "november.zip")
    shutil.move(downloads / "by-area.zip", data_dir / "by-area.zip")
    _write_dwca_of(downloads / "january.zip", [DEVIL_ROWS[0]], "0003456-270101000000000", taxon)
    dg.materialize(SPINE, instance=instance, partition_key=DEVIL, resources=resources)
    assert _devil_ids(db) == [5001]
    _write_dwca_of(downloads / "february.zip", [DEVIL_ROWS[3]], "0003457-270201000000000", taxon)
    # Searched now, over a snapshot of a download's answer: the plan knows the run writes a new one.
    planned = _plan_reading_downloads(db, resources, DEVIL_SPECIES).steps["gbif_raw"][DEVIL]
    assert (planned.action, planned.reason) == ("load", "request changed")
    dg.materialize(SPINE, instance=instance, partition_key=DEVIL, resources=resources)
    assert read_raw_snapshot(data_dir / "raw" / f"{DEVIL}.json").request == DEVIL_SPECIES.request()
    assert len(_devil_ids(db)) == DEVIL_SPECIES.lab_records


THYLACINE_QUERY = (
    '{"type":"and","predicates":[{"type":"equals","key":"COUNTRY","value":"AU"},'
    '{"type":"in","key":"TAXON_KEY","values":["2433","2435474"]}]}'
)


THYLACINE_ROWS = [
    "146.6\tDerwent Valley\tCC0_1_0\t7001\tThylacinus cynocephalus\t-42.6\t1930\t\t2435474\n",
    "145.8\tWaratah\tCC0_1_0\t7002\tThylacinus cynocephalus\t-41.4\t1933\t\t2435474\n",
]


def _plan_reading_downloads(db, resources: dict, species):
    """make plan for one species as it runs with GBIF_SOURCE=download."""
    return make_plan(
        db,
        resources["paths"],
        resources["geocoder"],
        [species],
        reads_downloads=True,
        masking_key_id=TEST_SEED_KEY.id,
    )


def _keyed_dwca_of(path: Path, rows: list[str], key: str, query: str) -> Path:
    """_write_dwca_of's archive with a taxonKey column (each row ends with one)."""
    _write_dwca_of(path, [], key, query)
    meta = META_XML.replace(
        "  </core>", '    <field index="8" term="http://rs.gbif.org/terms/1.0/taxonKey"/>\n  </core>'
    )
    with zipfile.ZipFile(path) as archive:
        metadata_xml = archive.read("metadata.xml")
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("meta.xml", meta)
        archive.writestr("metadata.xml", metadata_xml)
        text = "\ufeff" + HEADER.replace("\n", "\ttaxonKey\n") + "".join(rows)
        archive.writestr("occurrence.txt", text.encode("utf-8"))
    return path


@pytest.mark.db
@pytest.mark.dagster
def test_a_species_the_newer_download_asked_for_and_lacks_ends_empty_as_in_a_folder_holding_it_alone(
    db, database_url, data_dir, instance
):
    """A download whose query names a species' backbone key and takes its area holds all GBIF has of it:
    when the newer download of the query holds none, the partition ends empty (planned, then run), and
    its raw snapshot is the one a folder holding the newer download alone gives (not searched there
    either)."""
    resources = _download_resources(database_url, data_dir)
    downloads = data_dir / "downloads"
    thylacine = species_by_slug(THYLACINE)
    _keyed_dwca_of(downloads / "november.zip", THYLACINE_ROWS, "0001234-261101000000000", THYLACINE_QUERY)
    dg.materialize(SPINE, instance=instance, partition_key=THYLACINE, resources=resources)
    assert _devil_ids(db) == [7001, 7002]
    # A snapshot of the same request with another time (one written when the time could come from a
    # download that does not answer for the species) is written again, not kept.
    raw = data_dir / "raw" / f"{THYLACINE}.json"
    written = raw.read_bytes()
    raw.write_text(json.dumps({**json.loads(written), "retrieved": "2026-11-15T00:00:00Z"}), encoding="utf-8")
    index = index_of(downloads / "november.zip", data_dir, load_registry())
    assert ingest_species_from_downloads([index], thylacine, raw).written and raw.read_bytes() == written

    _keyed_dwca_of(downloads / "december.zip", [], "0002345-261201000000000", THYLACINE_QUERY)
    planned = _plan_reading_downloads(db, resources, thylacine).steps["occurrences"][THYLACINE]
    run = dg.materialize(SPINE, instance=instance, partition_key=THYLACINE, resources=resources)
    assert _devil_ids(db) == []
    assert metadata(run, "gbif_raw")["records_gone"] == 2
    assert planned.changes is not None
    assert metadata(run, "occurrences")["records_changed"] == planned.changes.describe()
    assert planned.changes.describe() == "reloaded: delta too large (0 added, 0 changed, 2 removed of 0)"
    snapshot = read_raw_snapshot(data_dir / "raw" / f"{THYLACINE}.json")
    assert [(d["key"], d["records"], d["records_sha256"]) for d in snapshot.request["downloads"]] == [
        ("0002345-261201000000000", 0, None)
    ]
    alone = _raw_from_alone(database_url, data_dir, [downloads / "december.zip"], THYLACINE)
    assert _raw_files(alone) == _raw_files(data_dir)


@pytest.mark.db
@pytest.mark.dagster
def test_a_species_the_older_download_asked_for_and_lacked_appears_from_the_newer_as_in_a_folder_alone(
    db, database_url, data_dir, instance
):
    """The other way round: the query asks for the thylacine and the older download holds none of it (its
    partition empty, not searched); the newer download of the query holds two records: they load, and the
    raw snapshot is the one a folder holding the newer download alone gives."""
    resources = _download_resources(database_url, data_dir)
    downloads = data_dir / "downloads"
    _keyed_dwca_of(downloads / "november.zip", [], "0001234-261101000000000", THYLACINE_QUERY)
    dg.materialize(SPINE, instance=instance, partition_key=THYLACINE, resources=resources)
    assert _devil_ids(db) == []
    _keyed_dwca_of(downloads / "december.zip", THYLACINE_ROWS, "0002345-261201000000000", THYLACINE_QUERY)
    run = dg.materialize(SPINE, instance=instance, partition_key=THYLACINE, resources=resources)
    assert _devil_ids(db) == [7001, 7002]
    assert metadata(run, "gbif_raw")["reason"] == "request changed"
    snapshot = read_raw_snapshot(data_dir / "raw" / f"{THYLACINE}.json")
    assert [(d["key"], d["records"]) for d in snapshot.request["downloads"]] == [
        ("0002345-261201000000000", 2)
    ]
    assert metadata(run, "occurrences")["action"] == "loaded"
    alone = _raw_from_alone(database_url, data_dir, [downloads / "december.zip"], THYLACINE)
    assert _raw_files(alone) == _raw_files(data_dir)


def _files(folder: Path) -> dict[str, str]:
    return {str(path.relative_to(folder)): sha256_file(path) for path in folder.rglob("*") if path.is_file()}


@pytest.mark.db
@pytest.mark.dagster
def test_make_plan_reads_a_newer_download_and_counts_what_occurrences_will_change(
    db, database_url, data_dir, instance
):
    """With GBIF_SOURCE=download the plan reads the downloads as gbif_raw will: a newer download of the
    query loads the species, and occurrences' record changes are the ones the run then reports. The plan
    writes nothing: not the data folder (the download not yet indexed is indexed in a temporary folder),
    not a state row."""
    resources = _download_resources(database_url, data_dir)
    downloads = data_dir / "downloads"
    taxon = '{"type":"equals","key":"TAXON_KEY","value":"2433"}'
    devil = species_by_slug(DEVIL)

    def row(key: int, year: int, locality: str = "Tasmania", longitude: str = "") -> str:
        longitude = longitude or f"{147 + (key - 6000) / 100:.2f}"
        return f"{longitude}\t{locality}\tCC0_1_0\t{key}\tSarcophilus harrisii\t-42.0\t{year}\t\n"

    november = [row(key, 2000 + key - 6000) for key in range(6001, 6021)]
    _write_dwca_of(downloads / "november.zip", november, "0001234-261101000000000", taxon)
    dg.materialize(SPINE, instance=instance, partition_key=DEVIL, resources=resources)

    def plan():
        return _plan_reading_downloads(db, resources, devil)

    unchanged = plan().steps
    assert [unchanged[name][DEVIL] for name in ("gbif_raw", "gbif_derived", "occurrences")] == [SKIPPED] * 3

    # December: 6001 gone; 6002 in another year; 6003's locality (occurrences keeps none) and 6004's
    # longitude written with another zero (derive writes the number) change no row; 6021 new.
    december = [row(6002, 1999), row(6003, 2003, "Hobart"), row(6004, 2004, longitude="147.040")]
    december += [*november[4:], row(6021, 2021)]
    _write_dwca_of(downloads / "december.zip", december, "0002345-261201000000000", taxon)
    files, state = _files(data_dir), db.execute("SELECT * FROM target_state ORDER BY 1, 2").fetchall()
    planned = plan()
    assert _files(data_dir) == files
    assert db.execute("SELECT * FROM target_state ORDER BY 1, 2").fetchall() == state
    assert planned.indexed_here == ["december.zip"]
    raw, derived, occurrences = (
        planned.steps[name][DEVIL] for name in ("gbif_raw", "gbif_derived", "occurrences")
    )
    assert (raw.action, raw.reason) == (
        "load",
        "request changed; newer download 0002345-261201000000000 of the same query",
    )
    assert (derived.action, derived.describe()) == ("load", "input changed (after gbif_raw)")
    assert occurrences.changes is not None
    assert occurrences.describe_with_changes() == (
        "input changed (after gbif_derived): 1 added, 1 changed, 1 removed of 20"
    )
    assert any("by delta (1): 1 added, 1 changed, 1 removed of 20" in line for line in planned.lines())

    run = dg.materialize(SPINE, instance=instance, partition_key=DEVIL, resources=resources)
    assert metadata(run, "gbif_raw")["reason"] == raw.reason
    assert metadata(run, "occurrences")["records_changed"] == occurrences.changes.describe()
    after = plan().steps
    assert [after[name][DEVIL] for name in ("gbif_raw", "gbif_derived", "occurrences")] == [SKIPPED] * 3


@pytest.mark.db
@pytest.mark.dagster
def test_a_dropped_download_is_observed_and_reaches_the_species_partition(
    db, database_url, data_dir, instance
):
    resources = _download_resources(database_url, data_dir)
    zip_path = _write_dwca(data_dir / "downloads" / "0001234-261129000000000.zip", DEVIL_ROWS)
    (data_dir / "downloads" / "notes.txt").write_text("where these came from\n", encoding="utf-8")

    observed = observe([gbif_downloads], instance=instance, resources=resources)
    assert observed.success
    [event] = observed.get_asset_observation_events()
    observation = event.asset_observation_data.asset_observation
    folder = open_downloads(data_dir / "downloads", data_dir / "download_index", [], build=False)
    assert observation.tags["dagster/data_version"] == folder.version
    # Observing never reads the records: until gbif_raw has indexed the download, its counts are unknown.
    assert observation.metadata["downloads"].value[0]["indexed"] is False
    # A file that is not a zip is not read, and says so.
    assert observation.metadata["ignored"].value == ["notes.txt"]
    # The step's output, as the run's page shows it, carries the observation's metadata, not Dagster's
    # own marker of a source asset (__source_asset_observation__).
    [output] = [event for event in observed.all_node_events if event.event_type_value == "STEP_OUTPUT"]
    assert set(output.event_specific_data.metadata) == {"downloads", "ignored"}

    run = dg.materialize(SPINE, instance=instance, partition_key=DEVIL, resources=resources)
    assert metadata(run, "occurrences")["rows"] == 3  # the genus-rank record reaches no species
    request = json.loads((data_dir / "raw" / f"{DEVIL}.json").read_text())["request"]
    assert request["downloads"][0]["sha256"] == describe_download(zip_path).sha256
    [indexed] = observe(
        [gbif_downloads], instance=instance, resources=resources
    ).get_asset_observation_events()
    listing = indexed.asset_observation_data.asset_observation.metadata["downloads"].value
    assert listing[0]["above_species_rank"] == 1 and listing[0]["zero_coordinates"] == 1
    assert db.execute(
        "SELECT array_agg(concat_ws('|', id, year, license, ST_AsText(geom)) ORDER BY id) FROM occurrences"
    ).fetchone()[0] == [
        "5001|2019|CC BY 4.0|POINT(147.3 -42.7)",
        "5002|POINT(146.1 -41.6)",
        "5003|2001|CC BY-NC 4.0",
    ]
    before = table_md5(db)

    again = dg.materialize(SPINE, instance=instance, partition_key=DEVIL, resources=resources)
    assert [metadata(again, name)["action"] for name in ("gbif_raw", "gbif_derived", "occurrences")] == [
        "skipped",
        "skipped",
        "skipped",
    ]
    assert table_md5(db) == before


@pytest.mark.db
@pytest.mark.dagster
def test_an_unchanged_zip_is_observed_by_its_stamp_and_a_rewritten_one_is_hashed_again(
    database_url, data_dir, instance
):
    """The observation keeps each zip's stamp (device, inode, size, mtime, ctime) with its sha256 and,
    while the stamp holds, does not read the zip again: a sha256 forged into the memo under the zip's own
    stamp is what it then reports. Rewriting the zip with the same bytes changes the stamp, so it is
    hashed again; make repair's setting (verify_targets) trusts no stamp; a removed zip's stamp goes."""
    resources = _download_resources(database_url, data_dir)
    zip_path = _write_dwca(data_dir / "downloads" / "0001234-261129000000000.zip", DEVIL_ROWS)
    stamps = resources["paths"].download_stamps()

    def observed_version(with_resources: dict = resources) -> str:
        [event] = observe(
            [gbif_downloads], instance=instance, resources=with_resources
        ).get_asset_observation_events()
        return str(event.asset_observation_data.asset_observation.tags["dagster/data_version"])

    true_sha256 = sha256_file(zip_path)
    assert observed_version() == downloads_version([(zip_path.name, true_sha256)])
    [kept] = read_file_stamps(stamps).values()
    assert kept == [*file_stamp(zip_path), true_sha256]
    forged = "f" * 64
    write_file_stamps(stamps, {zip_path.name: [*file_stamp(zip_path), forged]})
    assert observed_version() == downloads_version([(zip_path.name, forged)])
    repairing = {**resources, "warehouse": Warehouse(database_url=database_url, verify_targets=True)}
    forget_hashed_files()  # make repair is a new process: nothing the forged stamp vouched for is in it
    assert observed_version(repairing) == downloads_version([(zip_path.name, true_sha256)])

    zip_path.write_bytes(zip_path.read_bytes())  # the same bytes, written again: a new mtime and ctime
    assert observed_version() == downloads_version([(zip_path.name, true_sha256)])
    assert read_file_stamps(stamps)[zip_path.name][-1] == true_sha256
    zip_path.unlink()
    assert observed_version() == downloads_version([])
    assert read_file_stamps(stamps) == {}


@pytest.mark.db
def test_the_downloads_sensor_runs_once_per_new_download_and_only_for_the_download_source(
    database_url, data_dir, instance
):
    definitions = assemble(_download_resources(database_url, data_dir))
    sensor = definitions.resolve_sensor_def("downloads_sensor")

    def tick(cursor=None, resources=definitions.resources):
        context = dg.build_sensor_context(instance=instance, cursor=cursor, resources=resources)
        return sensor.evaluate_tick(context)

    empty = tick()
    assert empty.run_requests == [] and empty.cursor is not None
    _write_dwca(data_dir / "downloads" / "0001234-261129000000000.zip", DEVIL_ROWS)
    first = tick(empty.cursor)
    [request] = first.run_requests
    keys = partition_keys()
    assert request.tags["dagster/asset_partition_range_start"] == keys[0]
    assert request.tags["dagster/asset_partition_range_end"] == keys[-1]
    [observation] = first.asset_events
    assert observation.tags["dagster/data_version"] == (
        open_downloads(data_dir / "downloads", data_dir / "download_index", [], build=False).version
    )
    assert tick(first.cursor).run_requests == []

    searching = {**definitions.resources, "gbif": LabGbifSource(source="lab")}
    assert "does not read downloads" in tick(None, searching).skip_message


def test_a_species_is_found_by_its_backbone_key_as_derive_checks_it(shared_data, tmp_path):
    records = every_record(shared_data / DWCA_ZIP)
    by_key = dataclasses.replace(
        DEVIL_SPECIES,
        slug="bombus-by-key",
        scientific_name="Bombus rufocinctus",
        taxon_key=1340347,
        country="",
        state_province="",
    )
    by_name = dataclasses.replace(by_key, slug="bombus-by-name", taxon_key=None)
    index = index_of(shared_data / DWCA_ZIP, tmp_path, [by_key, by_name])
    for species in (by_key, by_name):
        expected = sorted(r["key"] for r in records if species.matches(r))
        part = index.part(species.slug)
        assert expected and part is not None and part.records == len(expected)
        raw = tmp_path / "raw" / f"{species.slug}.json"
        ingest_species_from_downloads([index], species, raw)
        assert [r["key"] for r in read_raw_snapshot(raw).iter_records(raw)] == expected


def test_make_run_weighs_species_by_the_records_the_download_index_gives_them(
    database_url, data_dir, monkeypatch
):
    """Under the distributed profile make run splits species by what the downloads hold for each: it
    builds the index gbif_raw then finds (the same folder and version). The lab's species weigh what
    the registry gives them; GBIF's search says nothing before it is asked, so nothing is weighed."""
    _write_dwca(data_dir / "downloads" / "0001234-261129000000000.zip", DEVIL_ROWS)
    definitions = assemble(_download_resources(database_url, data_dir))
    assert species_weights(definitions) is None  # the local profile: one species run, nothing to weigh
    monkeypatch.setenv("SURVEILLANCE_PROFILE", "distributed")
    weights = species_weights(definitions)
    index = open_downloads(data_dir / "downloads", data_dir / "download_index", load_registry(), build=False)
    [built] = index.indexes
    assert built is not None and weights == {slug: part.records for slug, part in built.parts.items()}
    assert weights == {DEVIL: 3}
    # The lab: every registry species, by its lab records (the devil's 2,000 the most); nothing built.
    shutil.rmtree(data_dir / "download_index")
    lab = species_weights(assemble(resources(database_url, data_dir)))
    assert lab == {species.slug: species.lab_records for species in load_registry()}
    assert lab[DEVIL] == max(lab.values()) == 2_000 and sum(lab.values()) == 26_391
    # GBIF's search: nothing to weigh, nothing built.
    searching = {**resources(database_url, data_dir), "gbif": LabGbifSource(source="api")}
    assert species_weights(assemble(searching)) is None
    assert not (data_dir / "download_index").exists()


def test_make_run_weighs_species_in_a_forked_process_with_the_same_answer(
    database_url, data_dir, monkeypatch, capfd, tmp_path
):
    """Under the distributed profile make run's first process weighs the species in a process it forks
    before it imports Dagster (make_run.py), by a plan read from the settings: the plan the definitions'
    resources give, so the same weights and the same index as in make run's own process, and the line
    about them is printed. A weigher that dies splits by count."""
    _write_dwca(data_dir / "downloads" / "0001234-261129000000000.zip", DEVIL_ROWS)
    monkeypatch.setenv("SURVEILLANCE_PROFILE", "distributed")
    monkeypatch.setenv("SURVEILLANCE_DATA_DIR", str(data_dir))
    monkeypatch.setenv("GBIF_SOURCE", "download")
    # live_resources, as the code location builds them from this environment.
    definitions = assemble(live_resources())
    plan = plan_from_settings(run_settings.resolve())
    assert plan == weighing_plan(definitions)
    with _ChildRuns() as children:
        weigher = ForkedWeights(plan)
        children.fork_ahead(1)  # forked after it, as main forks the runs' children
        assert weigher.result() == {DEVIL: 3}
        assert weigher.result() == {DEVIL: 3}  # main asks again on its way out
    assert "1 download(s) indexed, 3 records of 1 species, split over the workers by records" in (
        capfd.readouterr().out
    )
    index = open_downloads(data_dir / "downloads", data_dir / "download_index", load_registry(), build=False)
    [built] = index.indexes
    assert built is not None and {slug: part.records for slug, part in built.parts.items()} == {DEVIL: 3}
    # make repair reads every zip again: its plan does not trust the stamps, as its definitions do not.
    monkeypatch.setenv("SURVEILLANCE_VERIFY_TARGETS", "1")
    repairing = plan_from_settings(run_settings.resolve())
    assert not repairing.trust_stamps and repairing == weighing_plan(assemble(live_resources()))
    # An early weigher is kept when it weighs by the definitions' plan; one started by other settings is
    # ended unheard, and the species are weighed again by the definitions' plan.
    assert chosen_weigher(plan, early := ForkedWeights(plan)) is early
    assert early.result() == {DEVIL: 3}
    elsewhere = ForkedWeights(dataclasses.replace(plan, folder=DataFolder(tmp_path / "elsewhere")))
    again = chosen_weigher(plan, elsewhere)
    assert again is not None and again is not elsewhere and again.result() == {DEVIL: 3}
    assert elsewhere.result() is None  # ended, not heard
    assert chosen_weigher(None, ForkedWeights(plan)) is None  # locally nothing is weighed
    # A weigher that dies before it answers: no weights, so make run splits the species by count (the
    # species runs' gbif_raw then says what is wrong, as it does when the index refuses a download).
    broken = ForkedWeights(dataclasses.replace(plan, folder=None))  # type: ignore[arg-type]
    assert broken.result() is None
    assert "make run: the species were not weighed (AttributeError:" in capfd.readouterr().err


ECHIDNA = "tachyglossus-aculeatus"  # matched by name, as the devil: neither has a taxon key in the registry
MOVED_ZIP = "0001234-261129000000000.zip"


def _moving_rows(devil: tuple[int, int], echidna: tuple[int, int]) -> list[str]:
    """Per species, a record with a locality and no coordinates (geocoded_localities holds it) and one with
    a point (region_assignment holds it), by the gbifIDs given."""
    rows = []
    for name, (located, pointed) in (("Sarcophilus harrisii", devil), ("Tachyglossus aculeatus", echidna)):
        rows.append(f"\tMount Wellington\tCC0_1_0\t{located}\t{name}\t\t2020\t\n")
        rows.append(f"147.2\t\tCC0_1_0\t{pointed}\t{name}\t-42.8\t2020\t\n")
    return rows


@pytest.mark.db
@pytest.mark.dagster
def test_records_that_move_between_species_in_a_new_download_load_in_both_places_tables(
    db, database_url, data_dir, instance
):
    """GBIF re-identifies records between downloads. Here two species swap theirs: while one species
    reloads, the other still holds the records it is given. Each places table keys a row by species and
    id, as occurrences does, so both species load (keyed by id alone, each failed on the other's rows, in
    every run)."""
    bound = _download_resources(database_url, data_dir)
    assets = [*SPINE, geocoded_localities, region_assignment]
    _write_dwca(data_dir / "downloads" / MOVED_ZIP, _moving_rows(devil=(7001, 7003), echidna=(7002, 7004)))
    for slug in (DEVIL, ECHIDNA):
        dg.materialize(assets, instance=instance, partition_key=slug, resources=bound)
    held = "SELECT array_agg(concat_ws('|', species_id, id) ORDER BY species_id, id) FROM {}"
    devil, echidna = species_by_slug(DEVIL).species_id, species_by_slug(ECHIDNA).species_id
    assert db.execute(held.format("geocoded_localities")).fetchone()[0] == [
        f"{devil}|7001",
        f"{echidna}|7002",
    ]

    _write_dwca(data_dir / "downloads" / MOVED_ZIP, _moving_rows(devil=(7002, 7004), echidna=(7001, 7003)))
    for slug in (DEVIL, ECHIDNA):
        run = dg.materialize(assets, instance=instance, partition_key=slug, resources=bound)
        assert [metadata(run, name)["action"] for name in ("geocoded_localities", "region_assignment")] == [
            "loaded",
            "loaded",
        ]
    assert db.execute(held.format("geocoded_localities")).fetchone()[0] == [
        f"{devil}|7002",
        f"{echidna}|7001",
    ]
    assert db.execute(held.format("region_assignment") + " WHERE id IN (7003, 7004)").fetchone()[0] == [
        f"{devil}|7004",
        f"{echidna}|7003",
    ]


# The registry's next species after the devil, matched by its GBIF taxonKey; the one after it is not in the
# test download (the search's, through the lab fallback).
THYLACINE, PLATYPUS = "thylacinus-cynocephalus", "ornithorhynchus-anatinus"


def _devil_and_thylacine_download(path: Path) -> Path:
    """A DwC-A holding the devil's rows and two of the thylacine (matched by its taxonKey)."""
    meta = META_XML.replace(
        "  </core>", '    <field index="8" term="http://rs.gbif.org/terms/1.0/taxonKey"/>\n  </core>'
    )
    rows = [row.replace("\n", "\t\n") for row in DEVIL_ROWS] + [
        "146.6\tDerwent Valley\tCC0_1_0\t7001\tThylacinus cynocephalus\t-42.6\t1930\t\t2435474\n",
        "145.8\tWaratah\tCC0_1_0\t7002\tThylacinus cynocephalus\t-41.4\t1933\t\t2435474\n",
    ]
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("meta.xml", meta)
        archive.writestr("metadata.xml", METADATA_XML)
        archive.writestr(
            "occurrence.txt",
            ("\ufeff" + HEADER.replace("\n", "\ttaxonKey\n") + "".join(rows)).encode("utf-8"),
        )
    return path


class _CountedIngest:
    """gbif_raw's ingest, counting how many species are in it at once; with ``barrier``, each waits there
    for another before it starts (one at a time, the barrier times out)."""

    def __init__(self, barrier: threading.Barrier | None = None):
        self.ingest = occurrence_assets.refresh_raw_snapshot
        self.barrier = barrier
        self.lock = threading.Lock()
        self.inside = self.most_inside = 0

    def __call__(self, *args, **kwargs):
        if self.barrier is not None:
            self.barrier.wait()
        with self.lock:
            self.inside += 1
            self.most_inside = max(self.most_inside, self.inside)
        try:
            return self.ingest(*args, **kwargs)
        finally:
            with self.lock:
                self.inside -= 1


def _raw_files(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted((folder / "raw").iterdir())}


@pytest.mark.db
@pytest.mark.dagster
def test_gbif_raw_takes_two_species_at_once_only_when_the_downloads_hold_them_all_and_writes_the_same_files(
    database_url, data_dir, tmp_path, monkeypatch
):
    """Two species at a time when the downloads hold every species of the run; one at a time when a
    species is asked of the search. Either way the raw files are those of one species per run."""
    download = _devil_and_thylacine_download(tmp_path / "0001234-261129000000000.zip")

    def run(folder: Path, first: str, last: str) -> dg.ExecuteInProcessResult:
        # The same zip's bytes in each folder (a zip written again holds another time).
        (folder / "downloads").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(download, folder / "downloads" / download.name)
        with dg.instance_for_test() as instance:
            return dg.materialize(
                [gbif_raw],
                instance=instance,
                resources=_download_resources(database_url, folder),
                tags=partition_range_tags(first, last),
            )

    at_once = _CountedIngest(threading.Barrier(2, timeout=30))
    monkeypatch.setattr(occurrence_assets, "refresh_raw_snapshot", at_once)
    assert run(data_dir, DEVIL, THYLACINE).success and not at_once.barrier.broken
    assert at_once.most_inside == 2
    assert sorted(_raw_files(data_dir)) == sorted(
        f"{slug}{suffix}" for slug in (DEVIL, THYLACINE) for suffix in (".json", RECORDS_SUFFIX)
    )
    thylacine = data_dir / "raw" / f"{THYLACINE}.json"
    assert [r["key"] for r in read_raw_snapshot(thylacine).iter_records(thylacine)] == [7001, 7002]

    # One species at a time, each its own run: the same bytes.
    monkeypatch.setattr(occurrence_assets, "refresh_raw_snapshot", at_once.ingest)
    for slug in (DEVIL, THYLACINE):
        assert run(tmp_path / "one-by-one", slug, slug).success
    assert _raw_files(tmp_path / "one-by-one") == _raw_files(data_dir)

    # The platypus is in no download: the search is asked for it, and the run goes one species at a time.
    one_at_a_time = _CountedIngest()
    monkeypatch.setattr(occurrence_assets, "refresh_raw_snapshot", one_at_a_time)
    searched = tmp_path / "searched"
    assert run(searched, DEVIL, PLATYPUS).success
    assert one_at_a_time.most_inside == 1
    assert _raw_files(searched)[f"{DEVIL}.json"] == _raw_files(data_dir)[f"{DEVIL}.json"]
    sources = {
        slug: read_raw_snapshot(searched / "raw" / f"{slug}.json").source for slug in (DEVIL, PLATYPUS)
    }
    assert sources[DEVIL] == "download" != sources[PLATYPUS]
