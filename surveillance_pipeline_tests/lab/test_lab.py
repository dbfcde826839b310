"""The lab GBIF source: shaped like GBIF's occurrence search, and the same bytes everywhere."""

import hashlib
from collections import Counter

from surveillance_pipeline.core.keys import canonical_json
from surveillance_pipeline.gbif.client import PAGE_LIMIT, fetch_all_occurrences
from surveillance_pipeline.gbif.registry import load_registry, species_by_slug
from surveillance_pipeline.lab.gbif_client import LabGbifClient, lab_records
from surveillance_pipeline.samples.rules import pick_sample, summarize_ids

# sha256 over the canonical JSON of every lab page (all species, pages of 300, in registry order).
# A change here means every user's lab data changed: bump it only on purpose.
# Last bumped when records without coordinates gained a ``locality`` text (837 of them, for geocoding).
LAB_PAGES_SHA256 = "308497b304ab3364268e12700207157c23f6d1b20e495e2f9de1ea66ffc2e7c6"


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
