"""geocoded_localities and region_assignment: thin Dagster assets over the places core."""

import dagster as dg
import psycopg

from surveillance_pipeline.core.errors import InputError
from surveillance_pipeline.gbif.registry import species_by_slug
from surveillance_pipeline.geocoding.service import OneCallAtATime
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
from surveillance_pipeline.orchestration.resources import (
    DataPaths,
    GeocoderSource,
    ThreadConnections,
    Warehouse,
)
from surveillance_pipeline.places import geocoded, regions


@species_asset(
    # The memo of what the raw snapshot's records gave, to decide a skip without reading them.
    metadata=outputs_metadata(
        tables=["geocoded_localities", "geocode_calls"], folders=["memos/geocoded_localities"]
    ),
    group_name="places",
    # Other domains' assets are named by key: a domain imports no other domain's asset objects.
    deps=[dg.AssetKey("gbif_raw")],
    code_version=geocoded.GEOCODED_LOCALITIES.code_version,
    pool="geocoded_localities",
    description="Records with a locality text but no coordinates, geocoded through the call ledger "
    "(table geocode_calls: HMAC keys and points, never the text; each call committed on its own). "
    "The job key includes the checksum of the ledger entries used.",
)
def geocoded_localities(
    context: dg.AssetExecutionContext, geocoder: GeocoderSource, paths: DataPaths, warehouse: Warehouse
) -> PartitionEvents:
    client = OneCallAtATime(geocoder.geocoder())
    called: list[str] = []  # the partitions whose calls wrote the ledger (appended from their threads)
    # Two species at once: one's ledger round trips and reads overlap the other's (the calls themselves
    # stay one at a time; a locality two species share is asked once, under its ledger lock).
    side_by_side = partitions_side_by_side()
    with ThreadConnections.for_partitions(
        warehouse, partition_threads(context.partition_keys, side_by_side)
    ) as connections:

        def geocode_partition(slug: str) -> PartitionReport:
            result = geocoded.refresh_geocoded_localities(
                connections.get(),
                species=species_by_slug(slug),
                raw_path=paths.raw(slug),
                geocoder=client,
                salt=geocoder.ledger_salt,
                run_id=context.run.run_id,
                memo_path=paths.memo(geocoded.GEOCODED_LOCALITIES.name, slug),
            )
            if result.run.calls:
                called.append(slug)
            return outcome_report(
                result.refresh,
                table="geocoded_localities",
                geocoder=client.service,
                calls_made=result.run.calls,
                answers_reused=result.run.reused,
                localities=result.records,
                found=result.found,
            )

        yield from report_partitions(context, geocode_partition, side_by_side=side_by_side)
        if called:
            # The step's calls replaced the ledger's version after the first memos named it: name the
            # version now in each, so the next run's skips read one row, not each species' stamp. Only
            # a saving: what goes wrong here costs the next run its stamps, never this step its success.
            partitions = [
                (species_by_slug(slug), paths.raw(slug), paths.memo(geocoded.GEOCODED_LOCALITIES.name, slug))
                for slug in context.partition_keys
            ]
            try:
                settled = geocoded.settle_memo_versions(
                    connections.get(), partitions, client.service, geocoder.ledger_salt
                )
            except (InputError, OSError, ValueError, psycopg.Error) as error:
                context.log.warning(f"geocoded_localities: the memos keep their versions ({error})")
            else:
                context.log.info(f"geocoded_localities: the ledger's version named in {settled} memos")


class RegionAssignmentConfig(dg.Config):
    """The region layer: a GeoJSON or GeoPackage path (empty: the lab's districts) and its properties."""

    layer: str = ""
    id_property: str = "region_id"
    name_property: str = "name"


REGION_COUNTS_SCHEMA = dg.TableSchema(
    columns=[
        dg.TableColumn("region_id", "string"),
        dg.TableColumn("name", "string"),
        dg.TableColumn("within", "int", description="records whose point lies within the region"),
        dg.TableColumn("nearest", "int", description="records given the region as the nearest"),
    ]
)


@species_asset(
    metadata=outputs_metadata(tables=["region_assignment", "regions"], folders=["memos/region_assignment"]),
    group_name="places",
    deps=[dg.AssetKey("occurrences"), geocoded_localities],
    code_version=regions.REGION_ASSIGNMENT.code_version,
    pool="region_assignment",
    description="Each occurrence with a point (its own or its geocoded one) gets a region: the covering "
    "region with the lowest id, else the nearest by spheroid distance then region id. The layer is loaded "
    "into table regions; its sha256 enters the job key.",
)
def region_assignment(
    context: dg.AssetExecutionContext, config: RegionAssignmentConfig, paths: DataPaths, warehouse: Warehouse
) -> PartitionEvents:
    layer = regions.RegionLayer.configured(
        config.layer, config.id_property, config.name_property, default=paths.region_layer
    )
    # Each species' assignment is one statement the warehouse runs on one core: two at once use both.
    side_by_side = partitions_side_by_side()
    with ThreadConnections.for_partitions(
        warehouse, partition_threads(context.partition_keys, side_by_side), this_thread_too=True
    ) as connections:
        # The layer's load and the held keys on this thread's one connection (another costs ~8 ms).
        loaded = regions.load_regions(connections.get(), layer, context.run.run_id)
        layer_sha256 = loaded.parts["input"]
        context.log.info(f"regions: {loaded.action} ({loaded.reason}), {loaded.rows} from {layer.path}")
        held = regions.held_assignment_inputs(connections.get())

        def assign_partition(slug: str) -> PartitionReport:
            conn = connections.get()
            outcome = regions.refresh_region_assignment(
                conn, species=species_by_slug(slug), layer=layer, run_id=context.run.run_id, held=held
            )
            counts = regions.outcome_region_counts(
                conn, species_by_slug(slug), outcome, paths.memo(regions.REGION_ASSIGNMENT.name, slug)
            )
            return outcome_report(
                outcome,
                table="region_assignment",
                layer_sha256=layer_sha256,
                regions=dg.MetadataValue.table(
                    records=[dg.TableRecord(vars(count)) for count in counts],
                    schema=REGION_COUNTS_SCHEMA,
                ),
            )

        yield from report_partitions(context, assign_partition, side_by_side=side_by_side)
