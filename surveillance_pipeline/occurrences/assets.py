"""gbif_raw -> gbif_derived -> occurrences: thin Dagster assets over the Dagster-free core.

Each asset reports its data version (the raw and derived files' sha256; the job key for the table), an
``action`` (loaded or skipped) and a ``reason``, and writes one provenance row.
"""

from typing import Any

import dagster as dg

from surveillance_pipeline.core.keys import JobKeyParts, sha256_hex
from surveillance_pipeline.core.partition_files import delete_stale_staging_file
from surveillance_pipeline.core.refresh import (
    LOADED,
    SKIPPED,
    RefreshOutcome,
    record_provenance,
    report_derived_output,
)
from surveillance_pipeline.gbif.downloads import downloads_version, read_downloads
from surveillance_pipeline.gbif.ingest import IngestOutcome, ingest_species, ingest_species_from_downloads
from surveillance_pipeline.gbif.registry import Species, species_by_slug
from surveillance_pipeline.occurrences.derive import DERIVE_VERSION, DERIVED_COLUMNS, derive_raw_file
from surveillance_pipeline.occurrences.licenses import LICENSES
from surveillance_pipeline.occurrences.load import (
    SCHEMA_VERSION,
    TRANSFORM_VERSION,
    OccurrenceRules,
    load_occurrences,
    verified_derived_bytes,
)
from surveillance_pipeline.occurrences.partitions import species_partitions
from surveillance_pipeline.occurrences.raw import write_atomically
from surveillance_pipeline.outputs import outputs_metadata
from surveillance_pipeline.reporting import (
    PartitionEvents,
    PartitionReport,
    outcome_report,
    report_partitions,
)
from surveillance_pipeline.resources import DataPaths, GbifSource, Warehouse


class OccurrencesConfig(dg.Config):
    """What shapes the rows of ``occurrences`` (and so enters its job key)."""

    licenses: list[str] = list(LICENSES)
    require_coordinates: bool = False


SPECIES_ASSET: dict[str, Any] = {
    "partitions_def": species_partitions,
    # One run for a whole backfill range: per-partition runs cost seconds of process start each.
    "backfill_policy": dg.BackfillPolicy.single_run(),
}


@dg.observable_source_asset(
    group_name="occurrences",
    description="GBIF download zips (DwC-A or simple CSV) in data/downloads/; data version = sha256 over "
    "their names and bytes. Read by gbif_raw when GBIF_SOURCE=download.",
)
def gbif_downloads(paths: DataPaths) -> dg.ObserveResult:
    downloads = read_downloads(paths.downloads())
    return dg.ObserveResult(
        data_version=dg.DataVersion(downloads_version(downloads)),
        # What each download holds that derive will count or leave out: no license, 0,0, above species.
        metadata={
            "downloads": dg.MetadataValue.json(
                [
                    {
                        "file": download.path.name,
                        **download.identity(),
                        **download.counts(),
                        "licenses": download.licenses(),
                    }
                    for download in downloads
                ]
            ),
            "records": sum(len(download.records) for download in downloads),
        },
    )


@dg.asset(
    metadata=outputs_metadata(folders=["raw"]),
    **SPECIES_ASSET,
    group_name="occurrences",
    deps=[gbif_downloads],
    code_version="ingest-v1",
    pool="gbif_raw",
    description="GBIF occurrence search (or the downloads in data/downloads/) for one species, normalized "
    "into data/raw/<slug>.json. The only step that talks to a GBIF client.",
)
def gbif_raw(
    context: dg.AssetExecutionContext, gbif: GbifSource, paths: DataPaths, warehouse: Warehouse
) -> PartitionEvents:
    if gbif.reads_downloads():
        downloads = read_downloads(paths.downloads())

        def ingest(species: Species) -> IngestOutcome:
            return ingest_species_from_downloads(downloads, species, paths.raw(species.slug))

    else:
        client = gbif.client()

        def ingest(species: Species) -> IngestOutcome:
            return ingest_species(client, species, paths.raw(species.slug))

    with warehouse.connect() as conn:

        def ingest_partition(slug: str) -> PartitionReport:
            delete_stale_staging_file(paths.raw(slug))
            ingest_outcome = ingest(species_by_slug(slug))
            parts = {
                "request": ingest_outcome.request,
                "source": ingest_outcome.source,
                "records": ingest_outcome.records_sha256,
            }
            action = LOADED if ingest_outcome.written else SKIPPED
            outcome = RefreshOutcome(
                action, ingest_outcome.reason, ingest_outcome.file_sha256, parts, ingest_outcome.records
            )
            record_provenance(
                conn, run_id=context.run.run_id, asset="gbif_raw", partition_key=slug, outcome=outcome
            )
            return outcome_report(
                outcome,
                ingest_outcome.file_sha256,
                path=str(ingest_outcome.path),
                retrieved=ingest_outcome.retrieved,
            )

        yield from report_partitions(context, ingest_partition, upstream=None)


@dg.asset(
    metadata=outputs_metadata(folders=["derived"]),
    **SPECIES_ASSET,
    group_name="occurrences",
    deps=[gbif_raw],
    code_version=f"derive-v{DERIVE_VERSION}",
    pool="gbif_derived",
    description="Pure derive of data/raw/<slug>.json into data/derived/<slug>.csv "
    f"({','.join(DERIVED_COLUMNS)}, sorted by id). Refuses a raw snapshot whose request is stale.",
)
def gbif_derived(
    context: dg.AssetExecutionContext, paths: DataPaths, warehouse: Warehouse
) -> PartitionEvents:
    with warehouse.connect() as conn:

        def derive_partition(slug: str) -> PartitionReport:
            species = species_by_slug(slug)
            raw_path, derived_path = paths.raw(slug), paths.derived(slug)
            delete_stale_staging_file(derived_path)
            fresh = derive_raw_file(raw_path, species)
            derived = fresh.derived
            parts = JobKeyParts(
                input=fresh.raw_sha256,
                transform=DERIVE_VERSION,
                config={},
                schema=len(DERIVED_COLUMNS),
            )
            unchanged = derived_path.exists() and derived_path.read_bytes() == derived.data
            if not unchanged:
                write_atomically(derived_path, derived.data)
            outcome = report_derived_output(
                conn,
                asset="gbif_derived",
                partition_key=slug,
                parts=parts,
                rows=derived.rows,
                run_id=context.run.run_id,
                unchanged=unchanged,
            )
            return outcome_report(outcome, sha256_hex(derived.data), path=str(derived_path), **derived.counts)

        yield from report_partitions(context, derive_partition, upstream=gbif_raw.key)


@dg.asset(
    metadata=outputs_metadata(tables=["species", "occurrences"]),
    **SPECIES_ASSET,
    group_name="occurrences",
    deps=[gbif_derived],
    code_version=f"transform-v{TRANSFORM_VERSION}.schema-v{SCHEMA_VERSION}",
    pool="occurrences",
    description="PostGIS tables species and occurrences, one species partition per transaction under its "
    "job key (data version = job key).",
)
def occurrences(
    context: dg.AssetExecutionContext, config: OccurrencesConfig, paths: DataPaths, warehouse: Warehouse
) -> PartitionEvents:
    rules = OccurrenceRules(licenses=tuple(config.licenses), require_coordinates=config.require_coordinates)
    with warehouse.connect() as conn:

        def load_partition(slug: str) -> PartitionReport:
            species = species_by_slug(slug)
            derived = verified_derived_bytes(species, paths.raw(slug), paths.derived(slug))
            outcome = load_occurrences(
                conn, species=species, derived=derived, rules=rules, run_id=context.run.run_id
            )
            return outcome_report(
                outcome, outcome.job_key, table="occurrences", species_id=species.species_id
            )

        yield from report_partitions(context, load_partition, upstream=gbif_derived.key)
