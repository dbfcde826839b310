"""The live GBIF client against a local server serving recorded GBIF responses (never the internet)."""

import json

import pytest

from surveillance_pipeline.gbif.api import USER_AGENT, ApiGbifClient, GbifRequestError
from surveillance_pipeline.gbif.client import SearchLimitError, fetch_all_occurrences
from surveillance_pipeline.gbif.ingest import ingest_species
from surveillance_pipeline.gbif.match_registry import fill_missing_keys
from surveillance_pipeline.gbif.raw_snapshots import read_raw_snapshot
from surveillance_pipeline.gbif.registry import Species
from surveillance_pipeline.occurrences.derive import derive_occurrences
from surveillance_pipeline_tests.support.fake_gbif import FakeGbif

# The species of rgbif's recorded looping pages (3 pages of 250, taxonKey 3118771).
ENCELIA = Species(
    900,
    "encelia-californica",
    "Encelia californica",
    "California brittlebush",
    3118771,
    "Plantae",
    "US",
    "California",
    0,
)
EMPTY_PAGE = {"offset": 0, "limit": 300, "endOfRecords": True, "count": 0, "results": []}


def _recorded_pages(shared_data):
    folder = shared_data / "gbif" / "api-rgbif-fixtures" / "bodies"
    pages = [json.loads((folder / f"occ_data_looping__0{i}.json").read_bytes()) for i in (1, 2, 3)]
    total = sum(len(p["results"]) for p in pages)
    for page in pages:
        page["count"] = total  # the recording's count is GBIF's full 18,272; we serve these 750
    pages[-1]["endOfRecords"] = True
    return pages


@pytest.fixture()
def gbif():
    with FakeGbif() as fake:
        yield fake


def _client(gbif, sleeps):
    return ApiGbifClient(gbif.base_url, timeout=5, sleep=sleeps.append)


def test_pages_through_three_recorded_pages(gbif, shared_data, tmp_path):
    for page in _recorded_pages(shared_data):
        gbif.answer("occurrence/search", (200, {}, page), offset=str(page["offset"]))
    sleeps = []
    params = ENCELIA.request()["params"]
    records = fetch_all_occurrences(_client(gbif, sleeps), params)
    assert len(records) == len({r["key"] for r in records}) == 750
    assert [r["query"]["offset"] for r in gbif.requests] == ["0", "250", "500"]
    assert {r["query"]["limit"] for r in gbif.requests} == {"300"}
    assert gbif.requests[0]["query"]["taxonKey"] == "3118771"
    assert {r["user_agent"] for r in gbif.requests} == {USER_AGENT}
    assert sleeps == []

    raw = tmp_path / "raw.json"
    first = ingest_species(_client(gbif, sleeps), ENCELIA, raw, retrieved="2026-11-01T00:00:00Z")
    derived = derive_occurrences(read_raw_snapshot(raw), ENCELIA, raw)
    assert first.written and derived.rows == 750
    assert derived.counts["no_coordinates"] == 3
    again = ingest_species(_client(gbif, sleeps), ENCELIA, raw, retrieved="2026-11-08T00:00:00Z")
    assert not again.written, "identical records: the raw file and its retrieved time stay"
    assert derive_occurrences(read_raw_snapshot(raw), ENCELIA, raw).data == derived.data


def test_an_empty_result_is_no_records(gbif):
    gbif.answer("occurrence/search", (200, {}, EMPTY_PAGE))
    assert fetch_all_occurrences(_client(gbif, []), {"taxonKey": 1}) == []


@pytest.mark.parametrize(
    ("first", "expected_sleep"),
    [
        ((429, {"Retry-After": "7"}, {"message": "Too many requests"}), 7.0),
        ((500, {}, b"Internal error"), 1.0),
    ],
    ids=["429-retry-after", "500-backoff"],
)
def test_a_retryable_answer_then_success(gbif, first, expected_sleep):
    gbif.answer("occurrence/search", first, (200, {}, EMPTY_PAGE))
    sleeps = []
    assert fetch_all_occurrences(_client(gbif, sleeps), {"taxonKey": 1}) == []
    assert sleeps == [expected_sleep] and len(gbif.requests) == 2


def test_backoff_grows_and_gives_up(gbif):
    gbif.answer("occurrence/search", (503, {}, b"unavailable"))
    sleeps = []
    with pytest.raises(GbifRequestError, match="503 .* still failing after 5 attempts"):
        fetch_all_occurrences(_client(gbif, sleeps), {"taxonKey": 1})
    assert sleeps == [1.0, 2.0, 4.0, 8.0]


def test_a_404_fails_at_once_with_gbifs_message(gbif):
    gbif.answer("occurrence/search", (404, {}, {"message": "No such endpoint"}))
    sleeps = []
    with pytest.raises(GbifRequestError, match="404 .*No such endpoint"):
        fetch_all_occurrences(_client(gbif, sleeps), {"taxonKey": 1})
    assert len(gbif.requests) == 1 and sleeps == []


def test_more_than_the_search_limit_says_to_use_a_download(gbif, shared_data):
    page = _recorded_pages(shared_data)[0]
    page["count"] = 878_634_359
    gbif.answer("occurrence/search", (200, {}, page))
    with pytest.raises(SearchLimitError, match="at most 100,000.*GBIF download"):
        fetch_all_occurrences(_client(gbif, []), {"taxonKey": 1})


def test_species_match_reads_the_recorded_answer(gbif, shared_data):
    body = json.loads(
        (
            shared_data / "gbif" / "api-pygbif-cassettes" / "bodies" / "test_name_backbone__01.json"
        ).read_bytes()
    )
    gbif.answer("species/match", (200, {}, body))
    match = _client(gbif, []).species_match("Helianthus annuus")
    assert (match["usageKey"], match["rank"]) == (body["usageKey"], "SPECIES")
    assert gbif.requests[0]["query"] == {"name": "Helianthus annuus", "strict": "true"}


def test_only_http_base_urls_are_accepted():
    with pytest.raises(ValueError, match="http"):
        ApiGbifClient("file:///etc/passwd")


def test_the_registry_match_fills_only_exact_accepted_species(gbif, shared_data):
    bodies = shared_data / "gbif" / "api-pygbif-cassettes" / "bodies"
    exact = json.loads((bodies / "test_name_backbone__01.json").read_bytes())
    several = json.loads((bodies / "test_name_backbone_multiple_matches__01.json").read_bytes())
    gbif.answer("species/match", (200, {}, exact), (200, {}, several))
    registry = (
        "species_id,slug,scientific_name,vernacular_name,taxon_key,kingdom,country,state_province,lab_records\n"
        "1,helianthus-annuus,Helianthus annuus,sunflower,,Plantae,AU,Tasmania,5\n"
        "2,aso,Aso,,,Animalia,AU,Tasmania,5\n"
        "3,thylacinus-cynocephalus,Thylacinus cynocephalus,thylacine,2435474,Animalia,AU,Tasmania,5\n"
    )
    updated, verdicts = fill_missing_keys(registry, _client(gbif, []))
    assert [v.taxon_key for v in verdicts] == [exact["usageKey"], None]
    assert "matchType=NONE" in verdicts[1].note or "not taken" in verdicts[1].note
    lines = updated.splitlines()
    assert lines[1].split(",")[4] == str(exact["usageKey"])
    assert lines[2].split(",")[4] == "" and lines[3].split(",")[4] == "2435474"
    assert len(gbif.requests) == 2, "a species with a key is not asked about"
