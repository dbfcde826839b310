"""Where things live: the data folder and the warehouse, both from the environment."""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
# The code location (workspace.yaml): the module and its Definitions, which runs name as their origin.
CODE_LOCATION_MODULE = "surveillance_pipeline.definitions"
CODE_LOCATION_ATTRIBUTE = "defs"
DATA_DIR_VARIABLE = "SURVEILLANCE_DATA_DIR"
DATABASE_URL_VARIABLE = "SURVEILLANCE_DATABASE_URL"
GBIF_SOURCE_VARIABLE = "GBIF_SOURCE"
GBIF_BASE_URL_VARIABLE = "GBIF_BASE_URL"
GBIF_FALLBACK_SOURCE_VARIABLE = "GBIF_FALLBACK_SOURCE"
SPECIES_FILE_VARIABLE = "SURVEILLANCE_SPECIES_FILE"
# A YAML file of quality-test settings a user keeps (keys of occurrence_quality's config); unset: defaults.
QUALITY_FILE_VARIABLE = "SURVEILLANCE_QUALITY_FILE"
GEOCODER_VARIABLE = "GEOCODER"
GEOCODER_URL_VARIABLE = "GEOCODER_URL"
GEOCODER_REQUESTS_PER_SECOND_VARIABLE = "GEOCODER_REQUESTS_PER_SECOND"
GEOCODER_LEDGER_SALT_VARIABLE = "GEOCODER_LEDGER_SALT"
# A secret: keys the masked release's draws (core/seeds.py SeedKey). make run writes one into .local/env.sh.
RELEASE_MASKING_KEY_VARIABLE = "RELEASE_MASKING_KEY"
# "1": every skip compares the partition's fingerprint with its rows (make repair; core/fingerprints.py).
VERIFY_TARGETS_VARIABLE = "SURVEILLANCE_VERIFY_TARGETS"


def data_dir() -> Path:
    """``SURVEILLANCE_DATA_DIR``, else ``data/`` at the project root. Not a secret, so read at load."""
    return Path(os.environ.get(DATA_DIR_VARIABLE) or PROJECT_ROOT / "data").resolve()


# The distributed profile (docs/scaling.md): species runs execute their steps on Celery workers.
PROFILE_VARIABLE = "SURVEILLANCE_PROFILE"
LOCAL_PROFILE = "local"
DISTRIBUTED_PROFILE = "distributed"
REDIS_URL_VARIABLE = "REDIS_URL"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
# How many species one run of a backfill covers under the distributed profile.
PARTITIONS_PER_RUN_VARIABLE = "SURVEILLANCE_PARTITIONS_PER_RUN"
DEFAULT_PARTITIONS_PER_RUN = 8
# How many steps of one species-partitioned asset may run at once (different runs, different species):
# the workers' count is the useful value.
PARTITION_WRITERS_VARIABLE = "SURVEILLANCE_PARTITION_WRITERS"
DEFAULT_PARTITION_WRITERS = 2
# Seconds a step may go without its worker's heartbeat before Redis hands it to another worker: how long
# a dead worker's step waits to be taken over. A live worker's step is never handed on, however long.
STEP_VISIBILITY_TIMEOUT_VARIABLE = "SURVEILLANCE_STEP_VISIBILITY_TIMEOUT"
DEFAULT_STEP_VISIBILITY_TIMEOUT = 30


def profile() -> str:
    """``SURVEILLANCE_PROFILE``: ``local`` (the default: one process per run) or ``distributed``."""
    chosen = os.environ.get(PROFILE_VARIABLE, "").strip() or LOCAL_PROFILE
    if chosen not in (LOCAL_PROFILE, DISTRIBUTED_PROFILE):
        raise ValueError(
            f"{PROFILE_VARIABLE}={chosen!r}: expected {LOCAL_PROFILE!r} or {DISTRIBUTED_PROFILE!r}"
        )
    return chosen


def is_distributed() -> bool:
    return profile() == DISTRIBUTED_PROFILE


def positive_int(variable: str, default: int) -> int:
    text = os.environ.get(variable, "").strip()
    if not text:
        return default
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{variable}={text!r}: expected a whole number of at least 1")
    return int(text)
