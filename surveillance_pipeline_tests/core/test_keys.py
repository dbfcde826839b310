"""Job keys and canonical JSON: pure, no Dagster, no database."""

import pytest

from surveillance_pipeline.core.keys import (
    JobKeyParts,
    advisory_lock_id,
    canonical_json,
    describe_change,
    sha256_hex,
)
from surveillance_pipeline.occurrences.assets import OccurrencesConfig
from surveillance_pipeline.occurrences.load import OccurrenceRules, occurrence_job_parts

PARTS = JobKeyParts(input="abc", transform=1, config={"cap": 100, "licenses": ["CC0 1.0"]}, schema=1)


def test_canonical_json_sorts_keys_and_drops_spaces():
    assert canonical_json({"b": 1, "a": {"d": [1, 2], "c": "é"}}) == '{"a":{"c":"é","d":[1,2]},"b":1}'


def test_key_is_sha256_of_the_canonical_parts():
    expected = sha256_hex(
        b'{"config":{"cap":100,"licenses":["CC0 1.0"]},"input":"abc","schema":1,"transform":1}'
    )
    assert PARTS.key == expected


def test_key_does_not_depend_on_config_key_order():
    reordered = JobKeyParts(input="abc", transform=1, config={"licenses": ["CC0 1.0"], "cap": 100}, schema=1)
    assert reordered.key == PARTS.key


@pytest.mark.parametrize(
    "changed",
    [
        JobKeyParts(input="abd", transform=1, config=PARTS.config, schema=1),
        JobKeyParts(input="abc", transform=2, config=PARTS.config, schema=1),
        JobKeyParts(input="abc", transform=1, config={"cap": 99, "licenses": ["CC0 1.0"]}, schema=1),
        JobKeyParts(input="abc", transform=1, config=PARTS.config, schema=2),
    ],
    ids=["input", "transform", "config", "schema"],
)
def test_every_part_changes_the_key(changed):
    assert changed.key != PARTS.key


@pytest.mark.parametrize(
    ("previous", "current", "reason"),
    [
        (None, PARTS, "first load"),
        (PARTS.as_dict(), JobKeyParts("abd", 1, PARTS.config, 1), "input changed"),
        (PARTS.as_dict(), JobKeyParts("abc", 1, {"cap": 5}, 1), "config changed"),
        (PARTS.as_dict(), JobKeyParts("abc", 2, {"cap": 5}, 1), "transform and config changed"),
        (PARTS.as_dict(), JobKeyParts("x", 2, {"cap": 5}, 3), "input, transform, config and schema changed"),
        (PARTS.as_dict(), JobKeyParts("abc", 1, PARTS.config, 2), "schema changed"),
    ],
)
def test_reason_names_the_changed_parts(previous, current, reason):
    assert describe_change(previous, current) == reason


def test_config_part_includes_defaults_and_no_connection_settings():
    defaults = OccurrencesConfig().model_dump(mode="json")
    rules = OccurrenceRules(
        licenses=tuple(defaults["licenses"]), require_coordinates=defaults["require_coordinates"]
    )
    parts = occurrence_job_parts(b"id\n", rules)
    assert parts.config == {
        "licenses": ["CC BY 4.0", "CC BY-NC 4.0", "CC0 1.0"],
        "require_coordinates": False,
    }
    text = canonical_json(parts.as_dict())
    for connection_word in ("postgresql", "password", "host", "url"):
        assert connection_word not in text


def test_same_license_set_in_another_order_is_the_same_config():
    one = occurrence_job_parts(b"x", OccurrenceRules(licenses=("CC0 1.0", "CC BY 4.0")))
    other = occurrence_job_parts(b"x", OccurrenceRules(licenses=("CC BY 4.0", "CC0 1.0", "CC0 1.0")))
    assert one.key == other.key


def test_unknown_license_in_config_is_refused():
    with pytest.raises(ValueError, match="unknown licenses"):
        occurrence_job_parts(b"x", OccurrenceRules(licenses=("CC BY 4.0", "MIT")))


def test_advisory_lock_id_is_stable_and_signed_64_bit():
    lock = advisory_lock_id("occurrences", "sarcophilus-harrisii")
    assert lock == advisory_lock_id("occurrences", "sarcophilus-harrisii")
    assert lock != advisory_lock_id("occurrences", "thylacinus-cynocephalus")
    assert -(2**63) <= lock < 2**63
    # Pinned: the lock must be the same number in every process and Python (never hash()).
    assert lock == int.from_bytes(
        bytes.fromhex(sha256_hex(b"occurrences|sarcophilus-harrisii")[:16]), "big", signed=True
    )
