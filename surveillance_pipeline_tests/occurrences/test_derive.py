"""Ingest normalization and the pure derive: formats, licenses, and bad input named by file, record, field."""

import json

import pytest

from surveillance_pipeline.core.errors import InputError, StaleInputError
from surveillance_pipeline.core.recent import RecentValues
from surveillance_pipeline.gbif import ingest
from surveillance_pipeline.gbif import raw_snapshots as raw
from surveillance_pipeline.gbif.client import fetch_all_occurrences
from surveillance_pipeline.gbif.ingest import ingest_species
from surveillance_pipeline.gbif.licenses import normalize_license
from surveillance_pipeline.gbif.raw_snapshots import RawSnapshot, read_raw_snapshot
from surveillance_pipeline.gbif.registry import packaged_registry_path, read_registry, species_by_slug
from surveillance_pipeline.lab import gbif_client as lab_gbif_client
from surveillance_pipeline.lab.gbif_client import LabGbifClient
from surveillance_pipeline.occurrences import derive
from surveillance_pipeline.occurrences.derive import derive_occurrences, derive_raw_file
from surveillance_pipeline_tests.support.pipeline import EditedLabClient

DEVIL = species_by_slug("sarcophilus-harrisii")
THYLACINE = species_by_slug("thylacinus-cynocephalus")


def _snapshot(records, species=DEVIL):
    return RawSnapshot(species.request(), "2026-11-29T00:00:00Z", "lab", records)


def _devil_records():
    return [
        dict(r)
        for r in LabGbifClient().search_occurrences(DEVIL.request()["params"], offset=0, limit=5)["results"]
    ]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("http://creativecommons.org/publicdomain/zero/1.0/legalcode", "CC0 1.0"),
        ("http://creativecommons.org/licenses/by/4.0/legalcode", "CC BY 4.0"),
        ("https://creativecommons.org/licenses/by-nc/4.0/", "CC BY-NC 4.0"),
        ("CC_BY_4_0", "CC BY 4.0"),
        ("CC0_1_0", "CC0 1.0"),
        ("CC_BY_NC_4_0", "CC BY-NC 4.0"),
        ("", None),
        (None, None),
    ],
)
def test_licenses_normalize_to_short_names(value, expected):
    assert normalize_license(value) == expected


def test_unknown_license_is_an_error():
    with pytest.raises(ValueError, match="unknown license"):
        normalize_license("All rights reserved'; DROP TABLE occurrences; --")


def test_ingest_sorts_records_and_keys_and_keeps_an_unchanged_file(tmp_path):
    path = tmp_path / "raw" / "sarcophilus-harrisii.json"
    first = ingest_species(LabGbifClient(), DEVIL, path, retrieved="2026-11-01T00:00:00Z")
    assert first.written and first.reason == "first load" and first.records == 2000
    document = json.loads(path.read_bytes())
    keys = [r["key"] for r in document["records"]]
    assert keys == sorted(keys)
    assert list(document) == sorted(document)
    assert document["request"] == DEVIL.request()
    before = path.read_bytes()
    again = ingest_species(LabGbifClient(), DEVIL, path, retrieved="2026-11-08T00:00:00Z")
    assert not again.written and again.reason == "nothing changed"
    assert path.read_bytes() == before, "an unchanged fetch keeps the file and its retrieved time"


def test_an_unchanged_answer_is_told_from_the_summary_without_parsing_the_stored_file(tmp_path, monkeypatch):
    """The summary memo (request and records' sha256 under the file's sha256) decides an unchanged answer;
    a file changed since, or another request, is not decided by it."""
    path, summary = tmp_path / "raw" / "devil.json", tmp_path / "memos" / "gbif_raw" / "devil.json"
    first = ingest_species(LabGbifClient(), DEVIL, path, retrieved="2026-11-01T00:00:00Z", summary=summary)
    assert json.loads(summary.read_bytes())["file_sha256"] == first.file_sha256
    before = path.read_bytes()

    def parse_refused(*args, **kwargs):
        raise AssertionError("the stored snapshot was parsed")

    with monkeypatch.context() as patched:
        patched.setattr("surveillance_pipeline.gbif.ingest.parse_raw_snapshot", parse_refused)
        again = ingest_species(
            LabGbifClient(), DEVIL, path, retrieved="2026-11-08T00:00:00Z", summary=summary
        )
    assert (again.written, again.reason, again.file_sha256) == (False, "nothing changed", first.file_sha256)
    assert (again.records, again.records_sha256, again.retrieved) == (
        2000,
        first.records_sha256,
        first.retrieved,
    )
    assert path.read_bytes() == before

    # The file rewritten by hand with other records: another sha256, so the memo is not used.
    document = json.loads(before)
    document["records"] = document["records"][1:]
    path.write_text(json.dumps(document, sort_keys=True, indent=1))
    repaired = ingest_species(LabGbifClient(), DEVIL, path, retrieved="2026-11-08T00:00:00Z", summary=summary)
    assert (repaired.written, repaired.reason) == (True, "records changed")
    assert path.read_bytes() == before.replace(b"2026-11-01T00:00:00Z", b"2026-11-08T00:00:00Z")
    assert json.loads(summary.read_bytes())["file_sha256"] == repaired.file_sha256

    # A memo that vouches for this file under another request is not taken for this one.
    planted = json.loads(summary.read_bytes())
    planted["request"] = THYLACINE.request()
    summary.write_text(json.dumps(planted))
    kept = ingest_species(LabGbifClient(), DEVIL, path, retrieved="2026-11-09T00:00:00Z", summary=summary)
    assert (kept.written, kept.reason) == (False, "nothing changed")  # parsed and compared instead
    assert json.loads(summary.read_bytes())["request"] == DEVIL.request()


def test_a_lab_answer_whose_version_the_summary_holds_is_not_drawn_again(tmp_path, monkeypatch):
    """The lab versions its answers (its generator's source and the species' registry entry): the summary
    keeps the version its records were, with the code that stored them, and an equal version skips
    without serving the answer. A new version of either fetches and compares, as make repair always does;
    a lab that serves other pages (the tests' edited one) has no version."""
    path, summary = tmp_path / "raw" / "devil.json", tmp_path / "memos" / "gbif_raw" / "devil.json"
    params = DEVIL.request()["params"]

    def held_version() -> str:
        return json.loads(summary.read_bytes())["answer_version"]

    first = ingest_species(LabGbifClient(), DEVIL, path, retrieved="2026-11-01T00:00:00Z", summary=summary)
    version = LabGbifClient().answer_version(params)
    assert version is not None and isinstance(held_version(), str)
    before, held = path.read_bytes(), held_version()
    fetched: list[object] = []

    def fetch_counted(client, request_params):
        fetched.append(request_params)
        return fetch_all_occurrences(client, request_params)

    def ingest_again(**options):
        return ingest_species(
            LabGbifClient(), DEVIL, path, retrieved="2026-11-09T00:00:00Z", summary=summary, **options
        )

    monkeypatch.setattr("surveillance_pipeline.gbif.ingest.fetch_all_occurrences", fetch_counted)
    again = ingest_again()
    assert fetched == [], "an answer of the version held was served again"
    assert (again.written, again.reason, again.file_sha256, again.records, again.records_sha256) == (
        False,
        "nothing changed",
        first.file_sha256,
        2000,
        first.records_sha256,
    )
    assert again.retrieved == first.retrieved and path.read_bytes() == before

    # make repair trusts no version: fetched and compared, the file kept.
    repaired = ingest_again(trust_answer_versions=False)
    assert len(fetched) == 1 and (repaired.written, repaired.reason) == (False, "nothing changed")

    # Another generator (an edit to how the lab draws records), or other code storing the answers:
    # fetched and compared, the file kept, the new version held.
    for module, name in ((lab_gbif_client, "GENERATOR_SHA256"), (ingest, "STORING_CODE_SHA256")):
        with monkeypatch.context() as patched:
            patched.setattr(module, name, "0" * 64)
            fetches = len(fetched)
            kept = ingest_again()
            assert len(fetched) == fetches + 1 and (kept.written, kept.reason) == (False, "nothing changed")
            assert held_version() != held and path.read_bytes() == before
    assert LabGbifClient().answer_version(params) == version

    # The species' registry entry is part of the version, and of the answer: another count of lab records.
    registry = tmp_path / "species.csv"
    lines = packaged_registry_path().read_text(encoding="utf-8").splitlines(keepends=True)
    registry.write_text("".join(lines), encoding="utf-8")
    monkeypatch.setenv("SURVEILLANCE_SPECIES_FILE", str(registry))
    assert LabGbifClient().answer_version(params) == version, "the same entries from another file"
    registry.write_text("".join([lines[0], lines[1].replace(",2000,", ",1999,"), *lines[2:]]))
    read_registry.cache_clear()
    assert LabGbifClient().answer_version(params) not in (None, version)
    fewer = ingest_again()
    assert (fewer.written, fewer.records) == (True, 1999), "the answer of the registry read before was kept"
    monkeypatch.delenv("SURVEILLANCE_SPECIES_FILE")
    read_registry.cache_clear()

    assert EditedLabClient(lambda records: records).answer_version(params) is None


def test_derive_is_sorted_stable_and_pure(tmp_path):
    path = tmp_path / "raw.json"
    ingest_species(LabGbifClient(), DEVIL, path, retrieved="2026-11-01T00:00:00Z")
    snapshot = read_raw_snapshot(path)
    derived = derive_occurrences(snapshot, DEVIL, path)
    lines = derived.data.decode().splitlines()
    assert lines[0] == "id,year,longitude,latitude,license"
    ids = [int(line.split(",")[0]) for line in lines[1:]]
    assert ids == sorted(ids) and len(ids) == 2000 == derived.rows
    assert derived.counts["no_year"] > 0 and derived.counts["no_coordinates"] > 0
    shuffled = RawSnapshot(snapshot.request, "another time", "lab", list(reversed(snapshot.records)))
    assert derive_occurrences(shuffled, DEVIL, path).data == derived.data
    assert b"\r" not in derived.data


def test_the_same_raw_bytes_are_derived_once_and_new_bytes_afresh(tmp_path, monkeypatch):
    monkeypatch.setattr(derive, "_recent_derives", RecentValues(derive.RECENT_DERIVES_BYTES))
    path = tmp_path / "raw.json"
    ingest_species(LabGbifClient(), DEVIL, path, retrieved="2026-11-01T00:00:00Z")
    first = derive_raw_file(path, DEVIL)
    assert first.derived == derive_occurrences(read_raw_snapshot(path), DEVIL, path)
    assert derive_raw_file(path, DEVIL).derived is first.derived, "the same bytes are not derived twice"

    # Edited raw bytes (one record's year) are derived afresh, not served from what was kept.
    document = json.loads(path.read_text())
    record = next(r for r in document["records"] if "year" in r)
    record["year"] = 1951 if record["year"] != 1951 else 1952
    path.write_text(json.dumps(document, sort_keys=True, indent=1) + "\n")
    edited = derive_raw_file(path, DEVIL)
    assert edited.raw_sha256 != first.raw_sha256
    assert edited.derived.data != first.derived.data
    assert edited.derived == derive_occurrences(read_raw_snapshot(path), DEVIL, path)

    # Bounded: past the cap the oldest derives go.
    monkeypatch.setattr(derive, "_recent_derives", RecentValues(len(first.derived.data) + 1))
    derive_raw_file(path, DEVIL)
    record["year"] = 1953
    path.write_text(json.dumps(document, sort_keys=True, indent=1) + "\n")
    newest = derive_raw_file(path, DEVIL)
    assert derive._recent_derives.values() == [newest.derived]


def test_the_same_raw_bytes_are_parsed_once_and_new_bytes_afresh(tmp_path, monkeypatch):
    monkeypatch.setattr(raw, "_recent_snapshots", RecentValues(raw.RECENT_SNAPSHOTS_BYTES))
    path = tmp_path / "raw.json"
    ingest_species(LabGbifClient(), DEVIL, path, retrieved="2026-11-01T00:00:00Z")
    first = read_raw_snapshot(path)
    assert read_raw_snapshot(path) is first, "the same bytes are not parsed twice"
    # Another file with the same bytes is the same snapshot; errors still name the file read.
    copy = tmp_path / "copy.json"
    copy.write_bytes(path.read_bytes())
    assert read_raw_snapshot(copy) is first

    document = json.loads(path.read_text())
    document["retrieved"] = "2026-11-02T00:00:00Z"
    path.write_text(json.dumps(document, sort_keys=True, indent=1) + "\n")
    edited = read_raw_snapshot(path)
    assert edited.retrieved == "2026-11-02T00:00:00Z" and first.retrieved == "2026-11-01T00:00:00Z"

    path.write_text(path.read_text()[:-40])
    with pytest.raises(InputError, match=r"raw\.json.*malformed JSON"):
        read_raw_snapshot(path)


def test_derive_refuses_a_snapshot_fetched_with_another_request(tmp_path):
    stale_request = {
        "endpoint": "occurrence/search",
        "params": {**DEVIL.request()["params"], "country": "NZ"},
    }
    snapshot = RawSnapshot(stale_request, "2026-11-01T00:00:00Z", "lab", _devil_records())
    with pytest.raises(StaleInputError) as error:
        derive_occurrences(snapshot, DEVIL, tmp_path / "raw.json")
    message = str(error.value)
    assert "sarcophilus-harrisii" in message and "params.country: recorded 'NZ', now 'AU'" in message


def test_malformed_raw_json_names_file_and_line(tmp_path):
    path = tmp_path / "raw.json"
    path.write_text('{\n "records": [\n  {"key": 1,}\n ]\n}\n')
    with pytest.raises(InputError) as error:
        read_raw_snapshot(path)
    assert str(path) in str(error.value) and "line 3" in str(error.value)


@pytest.mark.parametrize(
    ("change", "field", "problem"),
    [
        ({"species": "Thylacinus cynocephalus"}, "species", "request asked for Sarcophilus harrisii"),
        ({"decimalLatitude": "-41.5"}, "decimalLatitude", "expected a number"),
        ({"decimalLongitude": "east"}, "decimalLongitude", "expected a number"),
        ({"decimalLatitude": 91.0}, "decimalLatitude", "outside -90..90"),
        ({"decimalLongitude": -180.5}, "decimalLongitude", "outside -180..180"),
        ({"decimalLongitude": float("nan")}, "decimalLongitude", "not a finite number"),
        ({"year": "1999"}, "year", "expected a whole number"),
        ({"year": 3000}, "year", "outside 1600..2100"),
        ({"key": "12x"}, "key", "expected an integer gbifID"),
        ({"key": 2**63}, "key", "outside"),
        ({"license": "CC BY-SA 4.0"}, "license", "unknown license"),
    ],
)
def test_bad_record_names_file_record_and_field(tmp_path, change, field, problem):
    records = _devil_records()
    records[2].update(change)
    with pytest.raises(InputError) as error:
        derive_occurrences(_snapshot(records), DEVIL, tmp_path / "raw.json")
    assert error.value.path == str(tmp_path / "raw.json")
    assert error.value.where.startswith("record 2")
    assert error.value.field == field
    assert problem in str(error.value)


def test_a_record_of_another_taxon_key_is_refused(tmp_path):
    records = [
        dict(r)
        for r in LabGbifClient().search_occurrences(THYLACINE.request()["params"], offset=0, limit=3)[
            "results"
        ]
    ]
    records[1]["taxonKey"] = records[1]["speciesKey"] = records[1]["acceptedTaxonKey"] = 2433376
    with pytest.raises(InputError) as error:
        derive_occurrences(_snapshot(records, THYLACINE), THYLACINE, tmp_path / "raw.json")
    assert error.value.field == "taxonKey" and "2435474" in str(error.value)


def test_duplicate_ids_are_refused(tmp_path):
    records = _devil_records()
    records[3]["key"] = records[1]["key"]
    with pytest.raises(InputError) as error:
        derive_occurrences(_snapshot(records), DEVIL, tmp_path / "raw.json")
    assert error.value.field == "key" and "duplicate id, first seen at record 1" in str(error.value)


def test_records_at_zero_zero_keep_no_geometry(tmp_path):
    records = _devil_records()
    records[0].update(decimalLatitude=0.0, decimalLongitude=0.0)
    derived = derive_occurrences(_snapshot(records), DEVIL, tmp_path / "raw.json")
    line = next(x for x in derived.data.decode().splitlines() if x.startswith(str(records[0]["key"])))
    assert line.split(",")[2:4] == ["", ""]
    assert derived.counts["zero_coordinates"] == 1
