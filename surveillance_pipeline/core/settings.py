"""Where things live: the data folder and the warehouse, both from the environment."""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DATA_DIR_VARIABLE = "SURVEILLANCE_DATA_DIR"
DATABASE_URL_VARIABLE = "SURVEILLANCE_DATABASE_URL"
GBIF_SOURCE_VARIABLE = "GBIF_SOURCE"
GBIF_BASE_URL_VARIABLE = "GBIF_BASE_URL"
GBIF_FALLBACK_SOURCE_VARIABLE = "GBIF_FALLBACK_SOURCE"
SPECIES_FILE_VARIABLE = "SURVEILLANCE_SPECIES_FILE"
GEOCODER_VARIABLE = "GEOCODER"
GEOCODER_URL_VARIABLE = "GEOCODER_URL"
GEOCODER_REQUESTS_PER_SECOND_VARIABLE = "GEOCODER_REQUESTS_PER_SECOND"
GEOCODER_LEDGER_SALT_VARIABLE = "GEOCODER_LEDGER_SALT"


def data_dir() -> Path:
    """``SURVEILLANCE_DATA_DIR``, else ``data/`` at the project root. Not a secret, so read at load."""
    return Path(os.environ.get(DATA_DIR_VARIABLE) or PROJECT_ROOT / "data").resolve()
