"""The downloads sensor: a GBIF download dropped in data/downloads/ -> observe it, then one species run.

Only with ``GBIF_SOURCE=download``: with another source, downloads are not what ingest reads. A tick never
parses a download. It looks at names, sizes and modification times first; only a zip that changed is
hashed (streamed: seconds for gigabytes), and its directory and XML members are read to check it is a
GBIF download. The records are read once, by gbif_raw, into the download's index. A zip that is not a
GBIF download is reported once, with its sha256, and not read again until it changes; no run is
requested while one is there, since gbif_raw would refuse the folder. The run covers every species
partition: every partition a download does not touch skips by its key. Run keys carry a trigger counter
kept in the cursor, so a return to an earlier folder state is a new trigger rather than a run key
Dagster has already seen.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dagster as dg

from surveillance_pipeline.core.errors import InputError
from surveillance_pipeline.core.keys import canonical_json, sha256_file, sha256_hex
from surveillance_pipeline.gbif.downloads import describe_download, downloads_version, list_downloads
from surveillance_pipeline.gbif.registry import partition_keys
from surveillance_pipeline.occurrences.assets import gbif_downloads
from surveillance_pipeline.orchestration.distributed import partition_ranges
from surveillance_pipeline.orchestration.reporting import DATA_VERSION_TAG, partition_range_tags
from surveillance_pipeline.orchestration.resources import DataPaths, GbifSource


def folder_listing(files: list[Path]) -> str:
    """A cheap fingerprint of the folder: names, sizes and modification times."""
    stats = [(path.name, path.stat().st_size, path.stat().st_mtime_ns) for path in files]
    return sha256_hex(canonical_json(stats).encode("utf-8"))


def zip_checksums(zips: tuple[Path, ...], known: dict[str, Any]) -> dict[str, list[Any]]:
    """name -> [size, mtime_ns, sha256]; a zip whose size and time are what the cursor recorded keeps
    its recorded sha256, any other is hashed."""
    checksums: dict[str, list[Any]] = {}
    for path in zips:
        stat = path.stat()
        recorded = known.get(path.name)
        if recorded is not None and recorded[:2] == [stat.st_size, stat.st_mtime_ns]:
            checksums[path.name] = recorded
        else:
            checksums[path.name] = [stat.st_size, stat.st_mtime_ns, sha256_file(path)]
    return checksums


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
        listing = list_downloads(paths.downloads())
        fingerprint = folder_listing([*listing.zips, *(paths.downloads() / name for name in listing.ignored)])
        if cursor.get("listing") == fingerprint:
            return dg.SensorResult(skip_reason="nothing changed in data/downloads/")
        cursor["listing"] = fingerprint
        checksums = zip_checksums(listing.zips, cursor.get("files", {}))
        cursor["files"] = checksums
        bad: dict[str, str] = {}
        problems: list[str] = []
        for path in listing.zips:
            sha256 = checksums[path.name][2]
            try:
                describe_download(path, sha256)
            except InputError as error:
                bad[path.name] = sha256
                if cursor.get("bad", {}).get(path.name) != sha256:
                    problems.append(str(error))
        cursor["bad"] = bad
        ignored = f"; not a zip, not read: {', '.join(listing.ignored)}" if listing.ignored else ""
        if bad:
            # Reported once per file version; the folder waits until the file is replaced or removed.
            reason = "; ".join(problems) or f"still not GBIF downloads: {', '.join(sorted(bad))}"
            return dg.SensorResult(skip_reason=reason + ignored, cursor=json.dumps(cursor, sort_keys=True))
        if not listing.zips and "version" not in cursor:
            return dg.SensorResult(
                skip_reason="no GBIF download in data/downloads/" + ignored,
                cursor=json.dumps(cursor, sort_keys=True),
            )
        version = downloads_version((name, entry[2]) for name, entry in checksums.items())
        observation = dg.AssetObservation(
            asset_key=gbif_downloads.key,
            metadata={
                "files": [path.name for path in listing.zips],
                "sha256": dg.MetadataValue.json({name: entry[2] for name, entry in checksums.items()}),
                "ignored": list(listing.ignored),
            },
            tags={DATA_VERSION_TAG: version},
        )
        if cursor.get("version") == version:
            # Touched but not changed (a copy over itself): observed again, nothing to run.
            return dg.SensorResult(
                skip_reason="the downloads' bytes did not change" + ignored,
                cursor=json.dumps(cursor, sort_keys=True),
                asset_events=[observation],
            )
        cursor["version"] = version
        cursor["trigger"] = cursor.get("trigger", 0) + 1
        # One run over every species; under the distributed profile, one per range, as a backfill splits.
        ranges = partition_ranges(partition_keys())
        return dg.SensorResult(
            run_requests=[
                dg.RunRequest(
                    run_key=f"downloads|{version}|{cursor['trigger']}"
                    + (f"|{first}" if len(ranges) > 1 else ""),
                    tags={**partition_range_tags(first, last), "surveillance/downloads": version},
                )
                for first, last in ranges
            ],
            cursor=json.dumps(cursor, sort_keys=True),
            asset_events=[observation],
        )

    return sensor
