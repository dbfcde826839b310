"""What each asset writes, declared on the asset itself, so the every-asset idempotency test can find it.

Every materializable asset carries ``outputs_metadata(...)``: the PostGIS tables it writes and the folders
under ``data/`` its files live in. The test asserts the declaration is there, so a new asset cannot escape
the check by forgetting it; an asset whose only output is its metadata declares nothing, explicitly.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import dagster as dg

OUTPUTS_METADATA_KEY = "surveillance/outputs"


@dataclass(frozen=True)
class DeclaredOutputs:
    tables: tuple[str, ...]
    # Relative to the data folder: ``raw`` for data/raw/<slug>.json, ``masked_release`` for its partitions.
    folders: tuple[str, ...]


def outputs_metadata(*, tables: Iterable[str] = (), folders: Iterable[str] = ()) -> dict[str, Any]:
    return {
        OUTPUTS_METADATA_KEY: dg.MetadataValue.json({"tables": sorted(tables), "folders": sorted(folders)})
    }


def declared_outputs(metadata: dict[str, Any]) -> DeclaredOutputs | None:
    """The declaration in an asset's definition metadata, or None when it has none."""
    value = metadata.get(OUTPUTS_METADATA_KEY)
    if value is None:
        return None
    data: dict[str, Any] = value.data if isinstance(value, dg.JsonMetadataValue) else value  # type: ignore[assignment]
    return DeclaredOutputs(tuple(data["tables"]), tuple(data["folders"]))
