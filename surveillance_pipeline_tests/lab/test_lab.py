"""The lab GBIF source: shaped like GBIF's occurrence search, and the same bytes everywhere."""

import hashlib
from collections import Counter

from surveillance_pipeline.core.keys import canonical_json
from surveillance_pipeline.gbif.client import PAGE_LIMIT, fetch_all_occurrences
from surveillance_pipeline.gbif.registry import load_registry, species_by_slug
from surveillance_pipeline.lab.gbif_client import LabGbifClient, _on_land, lab_records
from surveillance_pipeline.samples.rules import pick_sample, summarize_ids

# sha256 over the canonical JSON of every lab page (all species, pages of 300, in registry order).
# A change here means every user's lab data changed: bump it only on purpose.
# Last bumped when the records gained the data-quality problems an analyst filters for (fossil specimens,
# coarse uncertainty, centroids, duplicates and the rest: test_lab_shows_each_data_quality_problem) and the
# points of a species that does not live at sea were drawn on land.
LAB_PAGES_SHA256 = "d7c91b052f96a132f56ea51c0c4f7c63f8cf184c90385256ce24ab7154fd636f"


def _all_pages():
    client = LabGbifClient()
    for species in load_registry():
        offset = 0
        while True:
            page = client.search_occurrences(species.request()["params"], offset=offset, limit=PAGE_LIMIT)
            yield page
            if page["endOfRecords"]:
                break
            offset += len(page["results"])


def test_lab_pages_are_pinned_by_sha256():
    digest = hashlib.sha256()
    for page in _all_pages():
        digest.update(canonical_json(page).encode("utf-8"))
        digest.update(b"\n")
    assert digest.hexdigest() == LAB_PAGES_SHA256


def test_registry_has_71_species_with_unique_slugs():
    registry = load_registry()
    assert len(registry) == 71
    assert len({s.slug for s in registry}) == 71
    assert registry[0].slug == "sarcophilus-harrisii"


def test_pages_have_gbif_search_shape_and_page_until_end_of_records():
    devil = species_by_slug("sarcophilus-harrisii")
    client = LabGbifClient()
    first = client.search_occurrences(devil.request()["params"], offset=0, limit=PAGE_LIMIT)
    assert set(first) == {"offset", "limit", "endOfRecords", "count", "facets", "results"}
    assert (first["offset"], first["limit"], first["endOfRecords"], first["count"]) == (0, 300, False, 2000)
    last = client.search_occurrences(devil.request()["params"], offset=1800, limit=PAGE_LIMIT)
    assert (len(last["results"]), last["endOfRecords"]) == (200, True)
    record = first["results"][0]
    for field in (
        "key",
        "gbifID",
        "scientificName",
        "species",
        "license",
        "countryCode",
        "stateProvince",
        "basisOfRecord",
        "datasetKey",
        "issues",
        "occurrenceStatus",
    ):
        assert field in record
    assert record["gbifID"] == str(record["key"])


def test_unknown_request_gets_an_empty_result():
    page = LabGbifClient().search_occurrences({"taxonKey": 1, "country": "AU"}, offset=0, limit=300)
    assert (page["count"], page["results"], page["endOfRecords"]) == (0, [], True)


def test_lab_is_shaped_like_the_course_data():
    client = LabGbifClient()
    picked = 0
    licenses: Counter[str] = Counter()
    no_year = no_coordinates = localities = 0
    for species in load_registry():
        records = fetch_all_occurrences(client, species.request()["params"])
        ids = [r["key"] for r in records]
        assert len(set(ids)) == len(ids)
        assert all(100_000_000 <= i < 10_000_000_000 for i in ids), "gbifIDs have 9-10 digits"
        # The course's rule: first 100 per species by md5 of the id text, then id.
        picked += len(sorted(ids, key=lambda i: (hashlib.md5(str(i).encode()).hexdigest(), i))[:100])
        licenses.update(r["license"] for r in records)
        no_year += sum("year" not in r for r in records)
        no_coordinates += sum("decimalLatitude" not in r for r in records)
        localities += sum("locality" in r for r in records)
        assert all("decimalLatitude" not in r for r in records if "locality" in r)
        if species.slug == "sarcophilus-harrisii":
            assert len(records) == 2000
    assert picked == 4766
    assert set(licenses) == {
        "http://creativecommons.org/publicdomain/zero/1.0/legalcode",
        "http://creativecommons.org/licenses/by/4.0/legalcode",
        "http://creativecommons.org/licenses/by-nc/4.0/legalcode",
    }
    assert no_year > 0 and no_coordinates > 0
    # Only records without coordinates carry a locality, and most of those do: they are what gets geocoded.
    assert (no_coordinates, localities) == (1394, 837)


def test_the_course_summary_line_of_the_lab_is_pinned():
    picked = {
        species.species_id: [i for i, _ in pick_sample([r["key"] for r in lab_records(species.slug)], 100)]
        for species in load_registry()
    }
    assert summarize_ids(picked).line() == "records=4766 species=71 ids_md5=8645f37e4f651760662f56704c29c233"


def _error_point(latitude: float, longitude: float) -> str | None:
    """Which of the lab's planted error points a place is, None for a place in Tasmania."""
    fixed = {
        (-35.28303, 149.12903): "capital",
        (-25.73289, 134.491): "country-centroid",
        (-41.94104, 146.60017): "province-centroid",
        (55.67, 12.58): "institution",
    }
    if (latitude, longitude) in fixed:
        return fixed[latitude, longitude]
    if 0.1 <= latitude <= 0.4 and 0.1 <= longitude <= 0.4:
        return "near-zero"
    if latitude == -longitude and 40 <= longitude <= 43:
        return "equal-absolute"
    if -43.8 <= latitude <= -43.3 and 171.6 <= longitude <= 172.4:
        return "other-country"
    assert -43.6 <= latitude <= -39.6 and 144.5 <= longitude <= 148.5, (latitude, longitude)
    return None


def test_lab_shows_each_data_quality_problem():
    """Each problem a coordinate or quality test looks for is on a small share of the lab's records (counts
    in per mille of all records), and none breaks what every record keeps: present, never at 0,0, issues
    sorted, one institution per dataset."""
    found: Counter[str] = Counter()
    institutions: dict[str, set[str]] = {}
    total = 0
    for species in load_registry():
        before: dict | None = None
        for record in lab_records(species.slug):
            total += 1
            assert record["occurrenceStatus"] == "PRESENT"
            assert record["issues"] == sorted(record["issues"]) and "ZERO_COORDINATE" not in record["issues"]
            institutions.setdefault(record["datasetKey"], set()).add(record["institutionCode"])
            found[record["basisOfRecord"]] += 1
            found[record.get("establishmentMeans", "no establishmentMeans")] += 1
            found["individualCount"] += 1 <= record.get("individualCount", 0) <= 20
            found.update(issue for issue in record["issues"] if issue != "COORDINATE_ROUNDED")
            assert record["countryCode"] == species.country  # as GBIF's country filter answers
            if "year" in record:
                assert record["eventDate"].startswith(f"{record['year']:04d}-")
                found["before 1900"] += record["year"] < 1900
            if "decimalLatitude" in record:
                latitude, longitude = record["decimalLatitude"], record["decimalLongitude"]
                assert (latitude, longitude) != (0, 0)
                kind = _error_point(latitude, longitude) or "Tasmania"
                found[kind] += 1
                if kind == "Tasmania" and species.habitat != "marine":
                    found["at sea, not a marine species"] += not _on_land(longitude, latitude)
                uncertainty = record.get("coordinateUncertaintyInMeters")
                if uncertainty is None:
                    found["no uncertainty"] += 1
                elif uncertainty in (301.0, 3036.0, 999.0, 9999.0):
                    found["placeholder uncertainty"] += 1
                elif uncertainty > 10_000:
                    found["coarse uncertainty"] += 1
                found["coarse precision"] += record.get("coordinatePrecision", 0) >= 0.1
                found["duplicate"] += bool(before and "decimalLatitude" in before) and (
                    before["decimalLatitude"],
                    before["decimalLongitude"],
                    before["datasetKey"],
                ) == (latitude, longitude, record["datasetKey"])
            before = record
    assert total == 26391
    assert all(len(codes) == 1 for codes in institutions.values()) and len(institutions) == 6
    per_mille = {name: 1000 * count / total for name, count in found.items()}
    expected = {
        "FOSSIL_SPECIMEN": 10,
        "LIVING_SPECIMEN": 10,
        "INTRODUCED": 20,
        "MANAGED": 5,
        "NATIVE": 30,
        "individualCount": 500,
        "no uncertainty": 50,
        "placeholder uncertainty": 10,
        "coarse uncertainty": 30,
        "coarse precision": 15,
        "before 1900": 10,
        "COUNTRY_COORDINATE_MISMATCH": 3,
        "RECORDED_DATE_INVALID": 3,
        "TAXON_MATCH_FUZZY": 3,
        "TAXON_MATCH_HIGHERRANK": 3,
        "PRESUMED_NEGATED_LONGITUDE": 3,
        "COORDINATE_PRECISION_INVALID": 3,
        "capital": 1,
        "country-centroid": 0.5,
        "province-centroid": 0.5,
        "institution": 0.5,
        "near-zero": 0.5,
        "equal-absolute": 0.5,
        "duplicate": 10,
        "other-country": 5,
        "at sea, not a marine species": 5,
    }
    # Shares of the records with coordinates come out some 5% below their constant; draws scatter.
    assert {name: 0.4 * share <= per_mille.get(name, 0) <= 2 * share for name, share in expected.items()} == {
        name: True for name in expected
    }
