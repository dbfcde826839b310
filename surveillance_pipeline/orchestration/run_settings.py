"""The settings that change what a run writes, resolved once from the environment, and the run's copy of them.

The code location reads them from the environment when it loads: ``live_resources`` builds the resources
from ``resolve()``. Under the distributed profile every process that executes a step loads the code
location itself, each from its own environment, so a worker started without ``GBIF_SOURCE=download`` would
load lab data into a run that expected a download. So the run's process records what it resolved as the
run tag ``surveillance/settings`` (distributed.py, before it sends any step), and each step executed on a
worker compares its own resolution with the run's and refuses to run when one differs (resources.py),
naming the setting and both values. Secrets are recorded as a short digest, never as such.

Also here, though it shapes no row: SURVEILLANCE_VERIFY_TARGETS (make repair), which decides whether a
skip compares a partition's fingerprint, and so whether a repair run repairs.

Not here, because they do not change what a run writes: GEOCODER_REQUESTS_PER_SECOND (the pace of the
calls), GBIF_PASSWORD (the account is named by GBIF_USER), the profile, REDIS_URL and the partitions and
writers per run (where and how many steps run), DAGSTER_EVENT_BATCH_SIZE (how events are stored), the
Dagster storage variables (a worker on other storage cannot load the run at all) and the fault-point
variables (test hooks).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path

from psycopg.conninfo import conninfo_to_dict

from surveillance_pipeline.core.keys import canonical_json, sha256_hex
from surveillance_pipeline.core.settings import (
    DATA_DIR_VARIABLE,
    DATABASE_URL_VARIABLE,
    GBIF_BASE_URL_VARIABLE,
    GBIF_FALLBACK_SOURCE_VARIABLE,
    GBIF_SOURCE_VARIABLE,
    GEOCODER_LEDGER_SALT_VARIABLE,
    GEOCODER_URL_VARIABLE,
    GEOCODER_VARIABLE,
    QUALITY_FILE_VARIABLE,
    RELEASE_MASKING_KEY_VARIABLE,
    SPECIES_FILE_VARIABLE,
    VERIFY_TARGETS_VARIABLE,
    data_dir,
)
from surveillance_pipeline.gbif.api import DEFAULT_BASE_URL
from surveillance_pipeline.gbif.client import API_SOURCE, LAB_SOURCE
from surveillance_pipeline.gbif.registry import load_registry, registry_path
from surveillance_pipeline.geocoding.service import DEFAULT_GEOCODER_URL, LAB_GEOCODER

# The run tag holding the settings the run's process resolved, as canonical JSON: bookkeeping for the
# workers' comparison, under Dagster's hidden prefix (the Runs list leaves it out). Written out, not built
# from dagster_internals.HIDDEN_TAG_PREFIX: make run reads the settings before it imports dagster (the
# weigher forks first); test_dagster_internals pins that Dagster hides it.
SETTINGS_TAG = ".dagster/surveillance/settings"
GBIF_USER_VARIABLE = "GBIF_USER"
UNSET = "(unset)"


def _variable(name: str, default: str) -> str:
    return os.environ.get(name, "").strip() or default


def _digest(secret: str) -> str:
    """A short digest of a secret: enough to tell two values apart, too short to stand for the value."""
    return "sha256:" + sha256_hex(f"surveillance_pipeline setting\0{secret}".encode())[:12]


def _warehouse() -> str:
    """The warehouse as user@host:port/database: where a run writes, without the password."""
    url = os.environ.get(DATABASE_URL_VARIABLE, "").strip()
    if not url:
        return UNSET
    parts = conninfo_to_dict(url)
    user, host, port = parts.get("user", ""), parts.get("host", ""), parts.get("port", "5432")
    return f"{user}@{host}:{port}/{parts.get('dbname', '')}"


def _species() -> str:
    """The registry in use, by content (the same file may sit at another path on another host)."""
    species = load_registry()
    rows = [asdict(entry) for entry in species]
    return f"sha256:{sha256_hex(canonical_json(rows).encode())[:16]} ({len(species)} species)"


def _quality_file() -> str:
    """The quality tests' settings file in use, by content (read whole when a step resolves its rules)."""
    named = os.environ.get(QUALITY_FILE_VARIABLE, "").strip()
    if not named:
        return UNSET
    path = Path(named).expanduser().resolve()
    try:
        return f"sha256:{sha256_hex(path.read_bytes())[:16]}"
    except OSError:
        return f"unreadable: {path}"


def resolve() -> dict[str, str]:
    """Each data-shaping setting as this process resolves it (defaults filled in), by variable name."""
    salt = os.environ.get(GEOCODER_LEDGER_SALT_VARIABLE, "")
    masking_key = os.environ.get(RELEASE_MASKING_KEY_VARIABLE, "")
    return {
        GBIF_SOURCE_VARIABLE: _variable(GBIF_SOURCE_VARIABLE, LAB_SOURCE),
        GBIF_BASE_URL_VARIABLE: _variable(GBIF_BASE_URL_VARIABLE, DEFAULT_BASE_URL),
        GBIF_FALLBACK_SOURCE_VARIABLE: _variable(GBIF_FALLBACK_SOURCE_VARIABLE, API_SOURCE),
        GBIF_USER_VARIABLE: _variable(GBIF_USER_VARIABLE, UNSET),
        SPECIES_FILE_VARIABLE: _species(),
        QUALITY_FILE_VARIABLE: _quality_file(),
        DATA_DIR_VARIABLE: str(data_dir()),
        DATABASE_URL_VARIABLE: _warehouse(),
        GEOCODER_VARIABLE: _variable(GEOCODER_VARIABLE, LAB_GEOCODER),
        GEOCODER_URL_VARIABLE: _variable(GEOCODER_URL_VARIABLE, DEFAULT_GEOCODER_URL),
        GEOCODER_LEDGER_SALT_VARIABLE: _digest(salt) if salt else UNSET,
        RELEASE_MASKING_KEY_VARIABLE: _digest(masking_key) if masking_key else UNSET,
        # Not row-shaping, but what a repair run does: a worker that would not compare fingerprints at a
        # skip (make repair) would leave a partition the run is meant to repair as it is.
        VERIFY_TARGETS_VARIABLE: "1" if os.environ.get(VERIFY_TARGETS_VARIABLE, "") == "1" else "0",
    }


def as_tags(settings: Mapping[str, str]) -> dict[str, str]:
    return {SETTINGS_TAG: canonical_json(dict(settings))}


def from_tags(tags: Mapping[str, str]) -> dict[str, str] | None:
    """The run's settings, or None when the run carries none (launched by a process that records none)."""
    text = tags.get(SETTINGS_TAG)
    return None if text is None else dict(json.loads(text))


def differences(run: Mapping[str, str], here: Mapping[str, str]) -> list[str]:
    """One line per setting whose value here is not the run's (a setting only one side knows counts)."""
    return [
        f"{name}: the run has {run.get(name, UNSET)!r}, this worker {here.get(name, UNSET)!r}"
        + (f" (reading {registry_path()})" if name == SPECIES_FILE_VARIABLE else "")
        for name in sorted(set(run) | set(here))
        if run.get(name, UNSET) != here.get(name, UNSET)
    ]
