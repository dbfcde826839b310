"""The user's own species registry: SURVEILLANCE_SPECIES_FILE, add_species (lab offline, API through a local
fake GBIF serving a recorded species match), match_registry's writes, row checks, and the area filter."""

import json
import os
from pathlib import Path

import pytest

from surveillance_pipeline.gbif import add_species, match_registry
from surveillance_pipeline.gbif.api import ApiGbifClient
from surveillance_pipeline.gbif.registry import (
    RegistryError,
    Species,
    load_registry,
    packaged_registry_path,
    parse_registry,
    partition_keys,
    read_registry,
    registry_path,
    species_by_slug,
)
from surveillance_pipeline_tests.support.fake_gbif import FakeGbif
from surveillance_pipeline_tests.support.paths import CARRIED_DATA

HEADER = (
    "species_id,slug,scientific_name,vernacular_name,taxon_key,kingdom,country,state_province,lab_records\n"
)
# GBIF's v1 species match for Helianthus annuus, recorded by pygbif (see its PROVENANCE.md beside it).
HELIANTHUS_MATCH = CARRIED_DATA / "gbif" / "api-pygbif-cassettes" / "bodies" / "test_name_backbone__01.json"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    for name in ("SURVEILLANCE_SPECIES_FILE", "GBIF_SOURCE", "GBIF_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    read_registry.cache_clear()
    yield
    read_registry.cache_clear()


@pytest.fixture()
def offline(monkeypatch):
    """Any attempt to reach GBIF fails the test: the lab must answer on its own."""

    def refuse(*args, **kwargs):
        raise AssertionError("lab mode asked GBIF over the network")

    monkeypatch.setattr(ApiGbifClient, "get_json", refuse)


@pytest.fixture()
def gbif():
    with FakeGbif() as fake:
        yield fake


def _species(country="AU", state_province="Tasmania", taxon_key=None):
    return Species(1, "x-y", "X y", "", taxon_key, "Animalia", country, state_province, 0)


def _init(path: Path) -> None:
    add_species.main(["--init", "--registry", str(path)])


def _run_refused(argv, capsys=None) -> str:
    with pytest.raises(SystemExit) as refused:
        add_species.main(argv)
    assert refused.value.code not in (0, None)
    return str(refused.value.code)


# --- which file ----------------------------------------------------------------------------------------


def test_the_variable_switches_the_registry(tmp_path, monkeypatch):
    assert registry_path() == packaged_registry_path()
    assert len(load_registry()) == 71
    mine = tmp_path / "mine.csv"
    mine.write_text(
        HEADER
        + "7,vombatus-ursinus,Vombatus ursinus,common wombat,,Animalia,AU,Tasmania,0\n"
        + "3,helianthus-annuus,Helianthus annuus,,9206251,Plantae,,,0\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("SURVEILLANCE_SPECIES_FILE", str(mine))
    assert registry_path() == mine.resolve()
    assert partition_keys() == ["helianthus-annuus", "vombatus-ursinus"], "species_id order"
    assert species_by_slug("helianthus-annuus").taxon_key == 9206251
    with pytest.raises(KeyError, match=str(mine)):
        species_by_slug("sarcophilus-harrisii")
    monkeypatch.delenv("SURVEILLANCE_SPECIES_FILE")
    assert len(load_registry()) == 71, "the cache follows the variable back"


def test_a_relative_path_is_taken_from_the_current_directory(tmp_path, monkeypatch):
    (tmp_path / "mine.csv").write_text(HEADER + "1,a-b,A b,,,Plantae,AU,,0\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SURVEILLANCE_SPECIES_FILE", "mine.csv")
    assert registry_path() == (tmp_path / "mine.csv").resolve()
    assert partition_keys() == ["a-b"]


def test_a_missing_file_says_how_to_start_one(tmp_path, monkeypatch):
    monkeypatch.setenv("SURVEILLANCE_SPECIES_FILE", str(tmp_path / "nowhere.csv"))
    with pytest.raises(FileNotFoundError, match="nowhere.csv.*--init"):
        load_registry()


# --- checks on the file --------------------------------------------------------------------------------

GOOD_ROW = "1,vombatus-ursinus,Vombatus ursinus,common wombat,,Animalia,AU,Tasmania,0\n"


@pytest.mark.parametrize(
    ("text", "line", "field", "problem"),
    [
        (HEADER.replace(",kingdom", ""), 1, "kingdom", "missing column"),
        ("", 1, None, "empty file"),
        (HEADER + GOOD_ROW + "x,a,A a,,,Plantae,AU,,0\n", 3, "species_id", "positive whole number"),
        (HEADER + GOOD_ROW + "0,a,A a,,,Plantae,AU,,0\n", 3, "species_id", "positive whole number"),
        (HEADER + GOOD_ROW + "1,a,A a,,,Plantae,AU,,0\n", 3, "species_id", "duplicate 1, first on line 2"),
        (HEADER + GOOD_ROW + "2,vombatus-ursinus,V u,,,Plantae,AU,,0\n", 3, "slug", "first on line 2"),
        (HEADER + GOOD_ROW + "2,a.b,A b,,,Plantae,AU,,0\n", 3, "slug", "partition key"),
        (HEADER + GOOD_ROW + "2,a/b,A b,,,Plantae,AU,,0\n", 3, "slug", "partition key"),
        (HEADER + GOOD_ROW + "2,A-b,A b,,,Plantae,AU,,0\n", 3, "slug", "partition key"),
        (HEADER + GOOD_ROW + '2,"a,b",A b,,,Plantae,AU,,0\n', 3, "slug", "partition key"),
        (
            HEADER + GOOD_ROW + "2,a-b,A b,,12,Plantae,AU,,0\n3,c,C c,,12,Plantae,AU,,0\n",
            4,
            "taxon_key",
            "dup",
        ),
        (HEADER + GOOD_ROW + "2,a-b,A b,,k12,Plantae,AU,,0\n", 3, "taxon_key", "backbone key"),
        (HEADER + GOOD_ROW + "2,a-b,A b,,,Plantae,au,,0\n", 3, "country", "upper-case ISO"),
        (HEADER + GOOD_ROW + "2,a-b,A b,,,Plantae,AU, Tasmania,0\n", 3, "state_province", "spaces"),
        (HEADER + GOOD_ROW + "2,a-b,,,,Plantae,AU,,0\n", 3, "scientific_name", "empty"),
        (HEADER + GOOD_ROW + "2,a-b,A b,,,Plantae,AU,,-1\n", 3, "lab_records", "a count"),
        (HEADER + GOOD_ROW + "2,a-b,A b,,,Plantae,AU\n", 3, "state_province", "fewer fields"),
        (HEADER + GOOD_ROW + "2,a-b,A b,,,Plantae,AU,,0,9\n", 3, None, "more fields"),
    ],
)
def test_a_bad_row_is_named_by_file_line_and_field(tmp_path, monkeypatch, text, line, field, problem):
    mine = tmp_path / "mine.csv"
    mine.write_text(text, encoding="utf-8")
    monkeypatch.setenv("SURVEILLANCE_SPECIES_FILE", str(mine))
    with pytest.raises(ValueError) as refused:
        load_registry()
    message = str(refused.value)
    assert message.startswith(f"{mine.resolve()}: line {line}")
    assert (f"field {field}" in message) if field else ("field" not in message.split(":")[1])
    assert problem in message


def test_extra_columns_are_allowed_and_kept_by_add_species(tmp_path, monkeypatch, offline):
    mine = tmp_path / "mine.csv"
    mine.write_text(HEADER.replace("\n", ",notes\n") + GOOD_ROW.replace("\n", ",mine\n"), encoding="utf-8")
    monkeypatch.setenv("SURVEILLANCE_SPECIES_FILE", str(mine))
    assert partition_keys() == ["vombatus-ursinus"]
    add_species.main(["Thylacinus cynocephalus"])
    lines = mine.read_text(encoding="utf-8").splitlines()
    assert lines[0].endswith(",notes") and lines[1].endswith(",mine")
    assert (
        lines[2]
        == "2,thylacinus-cynocephalus,Thylacinus cynocephalus,thylacine,2435474,Animalia,AU,Tasmania,974,"
    )


# --- the area filter -----------------------------------------------------------------------------------


def test_an_empty_country_or_state_is_no_filter_in_the_request():
    assert _species().request()["params"] == {
        "country": "AU",
        "occurrenceStatus": "PRESENT",
        "stateProvince": "Tasmania",
        "scientificName": "X y",
    }
    assert _species(state_province="").request()["params"] == {
        "country": "AU",
        "occurrenceStatus": "PRESENT",
        "scientificName": "X y",
    }
    assert _species(country="", state_province="", taxon_key=5).request() == {
        "endpoint": "occurrence/search",
        "params": {"occurrenceStatus": "PRESENT", "taxonKey": 5},
    }


def test_the_packaged_lab_request_is_unchanged():
    assert species_by_slug("thylacinus-cynocephalus").request() == {
        "endpoint": "occurrence/search",
        "params": {
            "country": "AU",
            "occurrenceStatus": "PRESENT",
            "stateProvince": "Tasmania",
            "taxonKey": 2435474,
        },
    }


def test_in_area_applies_the_request_filter_to_a_downloaded_record():
    tasmania = _species()
    assert tasmania.in_area("AU", "Tasmania")
    assert tasmania.in_area("AU", "  tasmania ")
    assert tasmania.in_area("AU", "TASMANIA")
    assert not tasmania.in_area("au", "Tasmania"), "country codes are compared exactly"
    assert not tasmania.in_area("NZ", "Tasmania")
    assert not tasmania.in_area("AU", "Victoria")
    assert not tasmania.in_area("AU", None)
    assert not tasmania.in_area(None, "Tasmania")
    australia = _species(state_province="")
    assert australia.in_area("AU", None) and australia.in_area("AU", "Victoria")
    assert not australia.in_area("NZ", None)
    anywhere = _species(country="", state_province="")
    assert anywhere.in_area(None, None) and anywhere.in_area("NZ", "Otago")
    any_country = _species(country="")
    assert any_country.in_area("US", "tasmania") and not any_country.in_area("AU", None)


# --- add_species, lab mode (offline) -------------------------------------------------------------------


def test_lab_mode_adds_a_lab_species_offline_to_a_file_started_with_init(
    tmp_path, monkeypatch, offline, capsys
):
    mine = tmp_path / "registry" / "species.csv"
    monkeypatch.setenv("SURVEILLANCE_SPECIES_FILE", str(mine))
    add_species.main(["--init"])
    packaged = packaged_registry_path().read_bytes()
    assert mine.read_bytes() == packaged
    # The lab registry already holds every lab species: take one out to add it back by name.
    kept = [
        line
        for line in packaged.decode().splitlines(keepends=True)
        if ",thylacinus-cynocephalus," not in line
    ]
    mine.write_text("".join(kept), encoding="utf-8")
    read_registry.cache_clear()
    assert "thylacinus-cynocephalus" not in partition_keys()

    add_species.main(["thylacinus  CYNOCEPHALUS", "--vernacular", "Tasmanian tiger"])

    text = mine.read_bytes()
    assert text.startswith("".join(kept).encode())
    assert text[len("".join(kept)) :] == (
        b"72,thylacinus-cynocephalus,Thylacinus cynocephalus,Tasmanian tiger,2435474,"
        b"Animalia,AU,Tasmania,974,\n"  # the registry's habitat column, left empty (terrestrial)
    )
    assert b"\r" not in text
    assert sorted(os.listdir(mine.parent)) == ["species.csv"], "no temporary file left beside it"
    read_registry.cache_clear()
    assert species_by_slug("thylacinus-cynocephalus").species_id == 72
    printed = capsys.readouterr().out
    assert "added species 72 thylacinus-cynocephalus" in printed and "code location reloads" in printed


def test_lab_mode_adds_a_keyless_lab_species_without_inventing_a_key(tmp_path, offline):
    mine = tmp_path / "mine.csv"
    mine.write_text(HEADER + GOOD_ROW, encoding="utf-8")
    add_species.main(
        ["Sarcophilus harrisii", "--registry", str(mine), "--country", "au", "--state-province", ""]
    )
    assert mine.read_text(encoding="utf-8").splitlines()[-1] == (
        "2,sarcophilus-harrisii,Sarcophilus harrisii,Tasmanian devil,,Animalia,AU,,2000"
    )


def test_lab_mode_refuses_a_name_it_does_not_know(tmp_path, offline):
    mine = tmp_path / "mine.csv"
    mine.write_text(HEADER + GOOD_ROW, encoding="utf-8")
    message = _run_refused(["Helianthus annuus", "--registry", str(mine)])
    assert "not one of the lab's 71 species" in message and "GBIF_SOURCE=api" in message
    assert mine.read_text(encoding="utf-8") == HEADER + GOOD_ROW


def test_a_duplicate_is_refused_and_the_file_left_alone(tmp_path, offline):
    mine = tmp_path / "mine.csv"
    _init(mine)
    before = mine.read_bytes()
    message = _run_refused(["Vombatus ursinus", "--registry", str(mine)])
    assert "already in" in message and "vombatus-ursinus" in message and "nothing added" in message
    assert mine.read_bytes() == before


def test_without_a_registry_of_ones_own_it_says_to_set_the_variable(offline):
    package_bytes = packaged_registry_path().read_bytes()
    assert "SURVEILLANCE_SPECIES_FILE" in _run_refused(["Vombatus ursinus"])
    message = _run_refused(["Vombatus ursinus", "--registry", str(packaged_registry_path())])
    assert "inside the installed package" in message
    assert packaged_registry_path().read_bytes() == package_bytes


def test_init_refuses_to_overwrite_and_a_missing_file_needs_init(tmp_path, offline):
    mine = tmp_path / "mine.csv"
    assert "--init" in _run_refused(["Vombatus ursinus", "--registry", str(mine)])
    assert not mine.exists()
    _init(mine)
    assert "already exists" in _run_refused(["--init", "--registry", str(mine)])


def test_mixed_areas_need_an_explicit_area(tmp_path, offline):
    mine = tmp_path / "mine.csv"
    mine.write_text(HEADER + GOOD_ROW + "2,a-b,A b,,,Plantae,NZ,,0\n", encoding="utf-8")
    assert "--country" in _run_refused(["Sarcophilus harrisii", "--registry", str(mine)])
    add_species.main(
        ["Sarcophilus harrisii", "--registry", str(mine), "--country", "", "--state-province", ""]
    )
    assert mine.read_text(encoding="utf-8").splitlines()[-1].endswith(",Animalia,,,2000")


# --- add_species, API mode (the local fake GBIF, a recorded answer) -------------------------------------


def test_api_mode_adds_a_species_from_gbifs_species_match(tmp_path, monkeypatch, gbif, capsys):
    body = json.loads(HELIANTHUS_MATCH.read_bytes())
    gbif.answer("species/match", (200, {}, body))
    monkeypatch.setenv("GBIF_SOURCE", "api")
    monkeypatch.setenv("GBIF_BASE_URL", gbif.base_url)
    mine = tmp_path / "mine.csv"
    monkeypatch.setenv("SURVEILLANCE_SPECIES_FILE", str(mine))
    _init(mine)

    add_species.main(["Helianthus annuus", "--vernacular", "sunflower"])

    assert gbif.requests[-1]["path"] == "/v1/species/match"
    assert gbif.requests[-1]["query"] == {"name": "Helianthus annuus", "strict": "true"}
    assert mine.read_text(encoding="utf-8").splitlines()[-1] == (
        "72,helianthus-annuus,Helianthus annuus,sunflower,9206251,Plantae,AU,Tasmania,0,"
    )
    read_registry.cache_clear()
    added = species_by_slug("helianthus-annuus")
    assert added.request()["params"]["taxonKey"] == 9206251 and added.lab_records == 0
    assert "taxon key 9206251" in capsys.readouterr().out

    # The same taxon again, even under another spelling of its slug, is refused.
    message = _run_refused(["Helianthus annuus"])
    assert "same slug helianthus-annuus and taxon key 9206251" in message


def test_api_mode_refuses_the_same_key_under_another_name(tmp_path, monkeypatch, gbif):
    gbif.answer("species/match", (200, {}, json.loads(HELIANTHUS_MATCH.read_bytes())))
    monkeypatch.setenv("GBIF_SOURCE", "api")
    monkeypatch.setenv("GBIF_BASE_URL", gbif.base_url)
    mine = tmp_path / "mine.csv"
    mine.write_text(HEADER + "4,sunflower,Helianthus annuus L.,,9206251,Plantae,AU,,0\n", encoding="utf-8")
    message = _run_refused(["Helianthus annuus", "--registry", str(mine)])
    assert "same taxon key 9206251" in message and "species 4 (sunflower" in message


def test_api_mode_refuses_anything_but_an_exact_accepted_species(tmp_path, monkeypatch, gbif):
    fuzzy = {"usageKey": 1, "rank": "SPECIES", "status": "ACCEPTED", "matchType": "FUZZY", "confidence": 90}
    gbif.answer("species/match", (200, {}, fuzzy))
    monkeypatch.setenv("GBIF_SOURCE", "api")
    monkeypatch.setenv("GBIF_BASE_URL", gbif.base_url)
    mine = tmp_path / "mine.csv"
    mine.write_text(HEADER + GOOD_ROW, encoding="utf-8")
    message = _run_refused(["Helianthus anuus", "--registry", str(mine)])
    assert "matchType=FUZZY" in message
    assert mine.read_text(encoding="utf-8") == HEADER + GOOD_ROW


# --- match_registry writes only the user's file ---------------------------------------------------------


def test_match_registry_refuses_to_write_the_packaged_registry(gbif, monkeypatch):
    monkeypatch.setenv("GBIF_BASE_URL", gbif.base_url)
    with pytest.raises(SystemExit) as refused:
        match_registry.main(["--write"])
    assert "SURVEILLANCE_SPECIES_FILE" in str(refused.value.code)
    assert gbif.requests == [], "refused before asking GBIF"


def test_match_registry_fills_and_writes_the_users_file(tmp_path, monkeypatch, gbif):
    gbif.answer("species/match", (200, {}, json.loads(HELIANTHUS_MATCH.read_bytes())))
    monkeypatch.setenv("GBIF_BASE_URL", gbif.base_url)
    mine = tmp_path / "mine.csv"
    mine.write_text(HEADER + GOOD_ROW.replace("Vombatus ursinus", "Helianthus annuus"), encoding="utf-8")
    mine.chmod(0o640)
    monkeypatch.setenv("SURVEILLANCE_SPECIES_FILE", str(mine))
    match_registry.main(["--write"])
    assert mine.read_text(encoding="utf-8").splitlines()[1].split(",")[4] == "9206251"
    assert mine.stat().st_mode & 0o777 == 0o640, "the user's file keeps its permissions"
    assert sorted(os.listdir(tmp_path)) == ["mine.csv"]


def test_the_habitat_column_is_optional_and_checked():
    with_habitat = HEADER.rstrip("\n") + ",habitat\n" + GOOD_ROW.rstrip("\n") + ",marine\n"
    (seal,) = parse_registry(with_habitat, "mine.csv")
    assert (seal.habitat, seal.terrestrial) == ("marine", False)
    (wombat,) = parse_registry(HEADER + GOOD_ROW, "mine.csv")
    assert (wombat.habitat, wombat.terrestrial) == ("", True)
    bad = HEADER.rstrip("\n") + ",habitat\n" + GOOD_ROW.rstrip("\n") + ",Marine\n"
    with pytest.raises(RegistryError, match=r"mine\.csv: line 2, field habitat: 'Marine' is not one of"):
        parse_registry(bad, "mine.csv")
