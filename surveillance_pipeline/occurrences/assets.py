"""gbif_raw -> gbif_derived -> occurrences: thin Dagster assets over the Dagster-free core.

Each asset reports its data version (the raw and derived files' sha256; the job key for the table), an
``action`` (loaded or skipped) and a ``reason``, and writes one provenance row.
"""

from typing import Any

import dagster as dg

from surveillance_pipeline.core.fingerprints import verify_every_skip
from surveillance_pipeline.gbif.client import GbifClient
from surveillance_pipeline.gbif.download_index import DownloadIndex, DownloadsFolder, open_downloads
from surveillance_pipeline.gbif.ingest import RAW_ASSET, refresh_raw_snapshot, species_sources
from surveillance_pipeline.gbif.licenses import LICENSES
from surveillance_pipeline.gbif.registry import load_registry, species_by_slug
from surveillance_pipeline.occurrences.derive import (
    DERIVE_VERSION,
    DERIVED_ASSET,
    DERIVED_COLUMNS,
    refresh_derived_file,
)
from surveillance_pipeline.occurrences.load import (
    OCCURRENCES,
    OccurrenceRules,
    load_occurrences,
    verified_derived_file,
)
from surveillance_pipeline.occurrences.maps import occurrences_map
from surveillance_pipeline.orchestration.distributed import partitions_side_by_side
from surveillance_pipeline.orchestration.outputs import outputs_metadata
from surveillance_pipeline.orchestration.partitions import species_asset
from surveillance_pipeline.orchestration.reporting import (
    PartitionEvents,
    PartitionReport,
    outcome_report,
    partition_threads,
    report_partitions,
)
from surveillance_pipeline.orchestration.resources import DataPaths, GbifSource, ThreadConnections, Warehouse


class OccurrencesConfig(dg.Config):
    """What shapes the rows of ``occurrences`` (and so enters its job key)."""

    licenses: list[str] = list(LICENSES)
    require_coordinates: bool = False


# From specs, as devil_delivery is (snapshots/assets.py says why).
@dg.multi_observable_source_asset(
    specs=[
        dg.AssetSpec(
            "gbif_downloads",
            group_name="occurrences",
            description="GBIF download zips (DwC-A or simple CSV) in data/downloads/; data version = sha256 "
            "over their names and bytes. Read by gbif_raw when GBIF_SOURCE=download. Observing never parses "
            "a download.",
        )
    ],
)
def gbif_downloads(
    context: dg.AssetExecutionContext, paths: DataPaths, warehouse: Warehouse
) -> dg.ObserveResult:
    folder = open_downloads(
        paths.downloads(),
        paths.download_index(),
        load_registry(),
        build=False,
        stamps=None if warehouse.verify_targets else paths.download_stamps(),  # make repair hashes them
    )
    if folder.ignored:
        context.log.warning(f"data/downloads/: not a zip, not read: {', '.join(folder.ignored)}")
    return dg.ObserveResult(
        data_version=dg.DataVersion(folder.version),
        metadata=downloads_metadata(folder),
    )


def downloads_metadata(folder: DownloadsFolder) -> dict[str, Any]:
    """Per download: what it is and, once gbif_raw has indexed it, what derive will count or leave out
    (no license, 0,0, above species rank) and how many records each registry species gets."""
    listed = []
    for info, index in zip(folder.downloads, folder.indexes, strict=True):
        entry: dict[str, Any] = {"file": info.path.name, **info.identity()}
        if index is None:
            entry["indexed"] = False
        else:
            entry.update(index.counts, licenses=index.licenses, species=len(index.parts))
        listed.append(entry)
    return {
        "downloads": dg.MetadataValue.json(listed),
        "ignored": dg.MetadataValue.json(list(folder.ignored)),
    }


@species_asset(
    metadata=outputs_metadata(folders=["raw", "memos/gbif_raw"]),
    group_name="occurrences",
    deps=[gbif_downloads],
    code_version="ingest-v2",
    pool="gbif_raw",
    description="GBIF occurrence search (or the downloads in data/downloads/) for one species, normalized "
    "into data/raw/<slug>.json. The only step that talks to a GBIF client.",
)
def gbif_raw(
    context: dg.AssetExecutionContext, gbif: GbifSource, paths: DataPaths, warehouse: Warehouse
) -> PartitionEvents:
    indexes: tuple[DownloadIndex, ...] = ()
    if gbif.reads_downloads():
        # Each download version is read once, here, into its index; later runs only look it up.
        folder = open_downloads(
            paths.downloads(),
            paths.download_index(),
            load_registry(),
            build=True,
            stamps=None if warehouse.verify_targets else paths.download_stamps(),
        )
        indexes = tuple(index for index in folder.indexes if index is not None)
        if folder.ignored:
            context.log.warning(f"data/downloads/: not a zip, not read: {', '.join(folder.ignored)}")
    clients: list[GbifClient] = []

    def search_client() -> GbifClient:
        # Built on first use: a run whose species all come from downloads never needs one.
        if not clients:
            clients.append(gbif.client())
        return clients[0]

    # A species taken from the downloads is its part copied out of their index and, where a newer download
    # superseded an older one, a walk over both parts' ids: zlib and numpy, which leave Python's lock. When
    # the downloads hold every species, two are taken at once; a species asked of the search makes the
    # step go one species at a time, so its requests go one after another as always.
    keys = context.partition_keys
    registry = {species.slug: species for species in load_registry()}
    from_downloads = bool(indexes) and all(
        slug in registry and species_sources(indexes, registry[slug]).held() for slug in keys
    )
    side_by_side = partitions_side_by_side() if from_downloads else 1
    with ThreadConnections.for_partitions(
        warehouse, partition_threads(keys, side_by_side), this_thread_too=True
    ) as connections:
        # make repair trusts no file's stamp (every records file is hashed) and no answer's version (the
        # search is asked again).
        trust_stamps = not verify_every_skip(connections.get())

        def ingest_partition(slug: str) -> PartitionReport:
            outcome, ingested = refresh_raw_snapshot(
                connections.get(),
                species=species_by_slug(slug),
                raw_path=paths.raw(slug),
                indexes=indexes,
                search_client=search_client,
                run_id=context.run.run_id,
                summary=paths.memo(RAW_ASSET, slug),
                stamps=paths.stamps(RAW_ASSET, slug) if trust_stamps else None,
                trust_answer_versions=trust_stamps,
            )
            path = dg.MetadataValue.path(str(ingested.path))
            gone = {} if ingested.records_gone is None else {"records_gone": ingested.records_gone}
            return outcome_report(
                outcome, ingested.file_sha256, path=path, retrieved=ingested.retrieved, **gone
            )

        yield from report_partitions(context, ingest_partition, side_by_side=side_by_side)


@species_asset(
    metadata=outputs_metadata(folders=["derived", f"memos/{DERIVED_ASSET}"]),
    group_name="occurrences",
    deps=[gbif_raw],
    code_version=f"derive-v{DERIVE_VERSION}",
    pool="gbif_derived",
    description="Pure derive of data/raw/<slug>.json into data/derived/<slug>.csv "
    f"({','.join(DERIVED_COLUMNS)}, sorted by id). Refuses a raw snapshot whose request is stale. Data "
    "version: the derive's job key (the raw snapshot's sha256 and the derive's version).",
)
def gbif_derived(
    context: dg.AssetExecutionContext, paths: DataPaths, warehouse: Warehouse
) -> PartitionEvents:
    # A species' derive is Arrow's parse, zlib and sha256, which leave Python's lock while they work, so
    # two species at once keep both cores busy: the 71 species of the bench's 1M download derived one
    # after another took 1.7-2.2 s, two at a time 1.15-1.23 s (2026-12-07, /tmp script, the same sha256s).
    side_by_side = partitions_side_by_side()
    with ThreadConnections.for_partitions(
        warehouse, partition_threads(context.partition_keys, side_by_side), this_thread_too=True
    ) as connections:
        trust_stamps = not verify_every_skip(connections.get())  # make repair hashes every file

        def derive_partition(slug: str) -> PartitionReport:
            derived_path = paths.derived(slug)
            derived = refresh_derived_file(
                connections.get(),
                species=species_by_slug(slug),
                raw_path=paths.raw(slug),
                derived_path=derived_path,
                run_id=context.run.run_id,
                stamps=paths.stamps(DERIVED_ASSET, slug) if trust_stamps else None,
            )
            path = dg.MetadataValue.path(str(derived_path))
            # The data version is the derive's job key (the raw snapshot's sha256 and the derive's version),
            # not the CSV's sha256: occurrence_quality reads the raw snapshot's other terms through it, so a
            # snapshot that changed only in those (an issue flag, an uncertainty) must reach its readers.
            return outcome_report(
                derived.outcome, None, path=path, derived_sha256=derived.derived_sha256, **derived.counts
            )

        yield from report_partitions(context, derive_partition, side_by_side=side_by_side)


@species_asset(
    metadata=outputs_metadata(
        tables=["species", "occurrences"], folders=["figures/occurrences", f"memos/{OCCURRENCES.name}"]
    ),
    group_name="occurrences",
    deps=[gbif_derived],
    code_version=OCCURRENCES.code_version,
    pool="occurrences",
    description="PostGIS tables species and occurrences, one species partition per transaction under its "
    "job key (data version = job key).",
)
def occurrences(
    context: dg.AssetExecutionContext, config: OccurrencesConfig, paths: DataPaths, warehouse: Warehouse
) -> PartitionEvents:
    rules = OccurrenceRules(licenses=tuple(config.licenses), require_coordinates=config.require_coordinates)
    # Most of a species' load is the warehouse's (its insert, indexes, fingerprint), on one core: two
    # species at once keep both busy.
    side_by_side = partitions_side_by_side()
    with ThreadConnections.for_partitions(
        warehouse, partition_threads(context.partition_keys, side_by_side)
    ) as connections:
        verifying: list[bool] = []  # read once, on the first partition's connection (threads agree)

        def load_partition(slug: str) -> PartitionReport:
            conn = connections.get()
            species = species_by_slug(slug)
            if not verifying:
                verifying.append(verify_every_skip(conn))
            # gbif_derived's stamps, read only (make repair hashes every file): the derived file's
            # sha256 is also this load's key input.
            stamps = None if verifying[0] else paths.stamps(DERIVED_ASSET, slug)
            derived = verified_derived_file(conn, species, paths.raw(slug), paths.derived(slug), stamps)
            outcome = load_occurrences(
                conn,
                species=species,
                derived=derived,
                rules=rules,
                run_id=context.run.run_id,
                kept_lines=paths.memo(OCCURRENCES.name, f"{slug}.lines").with_suffix(".bin"),
                trust_kept_lines=not verifying[0],
            )
            return outcome_report(
                outcome,
                outcome.job_key,
                table="occurrences",
                # Text: an identifier, not a quantity for the UI to plot.
                species_id=str(species.species_id),
                map=dg.MetadataValue.md(
                    occurrences_map(conn, species, outcome.job_key, paths.figures("occurrences"))
                ),
            )

        yield from report_partitions(context, load_partition, side_by_side=side_by_side)
