"""The downloads sensor: a GBIF download dropped in data/downloads/ -> observe it, then one species run.

Only with ``GBIF_SOURCE=download``: with another source, downloads are not what ingest reads. A tick looks
at names, sizes and modification times first, so a folder of large zips is not re-hashed every tick; only
a change there reads and hashes the zips. The run covers every species partition: which species a
download holds is known only after reading it, and every partition it does not touch skips by its key.
Run keys carry a trigger counter kept in the cursor, so a return to an earlier folder state is a new
trigger rather than a run key Dagster has already seen.
"""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg

from surveillance_pipeline.core.errors import InputError
from surveillance_pipeline.core.keys import canonical_json, sha256_hex
from surveillance_pipeline.gbif.downloads import download_files, downloads_version, read_downloads
from surveillance_pipeline.gbif.registry import partition_keys
from surveillance_pipeline.occurrences.assets import gbif_downloads
from surveillance_pipeline.reporting import DATA_VERSION_TAG, partition_range_tags
from surveillance_pipeline.resources import DataPaths, GbifSource


def folder_listing(files: list[Path]) -> str:
    """A cheap fingerprint of the folder: names, sizes and modification times."""
    stats = [(path.name, path.stat().st_size, path.stat().st_mtime_ns) for path in files]
    return sha256_hex(canonical_json(stats).encode("utf-8"))


def downloads_sensor(job_name: str) -> dg.SensorDefinition:
    @dg.sensor(
        name="downloads_sensor",
        job_name=job_name,
        default_status=dg.DefaultSensorStatus.RUNNING,
        minimum_interval_seconds=30,
        description="With GBIF_SOURCE=download: a new or changed zip in data/downloads/ -> observe "
        "gbif_downloads and run every species partition (unchanged ones skip by their keys).",
    )
    def sensor(context: dg.SensorEvaluationContext, paths: DataPaths, gbif: GbifSource) -> dg.SensorResult:
        if not gbif.reads_downloads():
            return dg.SensorResult(skip_reason=f"GBIF_SOURCE={gbif.source}: ingest does not read downloads")
        cursor = json.loads(context.cursor) if context.cursor else {}
        files = download_files(paths.downloads())
        listing = folder_listing(files)
        if cursor.get("listing") == listing:
            return dg.SensorResult(skip_reason="nothing changed in data/downloads/")
        cursor["listing"] = listing
        try:
            downloads = read_downloads(paths.downloads())
        except InputError as error:
            # Remembered in the cursor, so the same broken zip is reported once, not re-read every tick.
            return dg.SensorResult(skip_reason=str(error), cursor=json.dumps(cursor, sort_keys=True))
        if not downloads and "version" not in cursor:
            return dg.SensorResult(
                skip_reason="no GBIF download in data/downloads/", cursor=json.dumps(cursor, sort_keys=True)
            )
        version = downloads_version(downloads)
        observation = dg.AssetObservation(
            asset_key=gbif_downloads.key,
            metadata={
                "files": [d.path.name for d in downloads],
                "records": sum(len(d.records) for d in downloads),
            },
            tags={DATA_VERSION_TAG: version},
        )
        if cursor.get("version") == version:
            # Touched but not changed (a copy over itself): observed again, nothing to run.
            return dg.SensorResult(
                skip_reason="the downloads' bytes did not change",
                cursor=json.dumps(cursor, sort_keys=True),
                asset_events=[observation],
            )
        cursor["version"] = version
        cursor["trigger"] = cursor.get("trigger", 0) + 1
        keys = partition_keys()
        return dg.SensorResult(
            run_requests=[
                dg.RunRequest(
                    run_key=f"downloads|{version}|{cursor['trigger']}",
                    tags={**partition_range_tags(keys[0], keys[-1]), "surveillance/downloads": version},
                )
            ],
            cursor=json.dumps(cursor, sort_keys=True),
            asset_events=[observation],
        )

    return sensor
