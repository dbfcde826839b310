"""occurrence_sample (per species) and occurrence_sample_summary, with the three-engine check."""

import dagster as dg

from surveillance_pipeline.core.refresh import WHOLE_TARGET
from surveillance_pipeline.gbif.registry import load_registry, species_by_slug
from surveillance_pipeline.orchestration.automation import REFRESH_WHEN_INPUTS_CHANGE
from surveillance_pipeline.orchestration.distributed import partitions_side_by_side
from surveillance_pipeline.orchestration.outputs import outputs_metadata
from surveillance_pipeline.orchestration.partitions import species_asset
from surveillance_pipeline.orchestration.reporting import (
    PartitionEvents,
    PartitionReport,
    outcome_report,
    partition_threads,
    report_asset,
    report_partitions,
)
from surveillance_pipeline.orchestration.resources import DataPaths, ThreadConnections, Warehouse
from surveillance_pipeline.samples.engines import (
    ENGINES_CHECK,
    engine_summaries,
    engines_inputs_key,
    keep_agreement,
    kept_agreement,
    recorded_rules,
)
from surveillance_pipeline.samples.load import (
    DEFAULT_CAP,
    DEFAULT_POLICY,
    OCCURRENCE_SAMPLE,
    SUMMARY_VERSION,
    held_sample_inputs,
    refresh_sample_summary,
    refresh_species_sample,
)


class SampleConfig(dg.Config):
    """The sample's row-shaping settings: how many records per species, and from which of them."""

    cap: int = DEFAULT_CAP
    # keep_all: over every record of occurrences (the sample's definition); drop_any_flagged: over the
    # records no enabled occurrence_quality test flagged.
    policy: str = DEFAULT_POLICY


@species_asset(
    metadata=outputs_metadata(tables=["occurrence_sample", "sample_drift"]),
    group_name="samples",
    # Another domain's asset is named by key: a domain imports no other domain's asset objects.
    # occurrence_quality: read only under a policy that drops flagged records (its content version is then
    # in the sample's key); otherwise its new data versions skip here.
    deps=[dg.AssetKey("occurrences"), dg.AssetKey("occurrence_quality")],
    automation_condition=REFRESH_WHEN_INPUTS_CHANGE,
    code_version=OCCURRENCE_SAMPLE.code_version,
    pool="occurrence_sample",
    description="Per species, the first `cap` occurrences by md5(id::text), then id, computed in PostGIS "
    "(table occurrence_sample), over every record or (policy drop_any_flagged) over those no quality test "
    "flagged; each refresh records which ids entered and left (table sample_drift).",
)
def occurrence_sample(
    context: dg.AssetExecutionContext, config: SampleConfig, warehouse: Warehouse
) -> PartitionEvents:
    # Each species' sample is one statement the warehouse runs on one core: two at once use both.
    side_by_side = partitions_side_by_side()
    with ThreadConnections.for_partitions(
        warehouse, partition_threads(context.partition_keys, side_by_side), this_thread_too=True
    ) as connections:
        held = held_sample_inputs(connections.get())

        def sample_partition(slug: str) -> PartitionReport:
            outcome, drift = refresh_species_sample(
                connections.get(),
                species=species_by_slug(slug),
                cap=config.cap,
                run_id=context.run.run_id,
                held=held,
                policy=config.policy,
            )
            return outcome_report(
                outcome,
                entered=_drift_table(drift.entered),
                left=_drift_table(drift.left),
            )

        yield from report_partitions(context, sample_partition, side_by_side=side_by_side)


DRIFT_SCHEMA = dg.TableSchema(
    columns=[
        dg.TableColumn("id", "int", description="gbifID"),
        dg.TableColumn("pick", "int", description="rank in md5(id::text), id order"),
    ]
)


def _drift_table(drift: list[tuple[int, int]]) -> dg.TableMetadataValue:
    """Ids that entered or left the sample, with their pick, as a table in the UI."""
    return dg.MetadataValue.table(
        records=[dg.TableRecord({"id": gbif_id, "pick": pick}) for gbif_id, pick in drift],
        schema=DRIFT_SCHEMA,
    )


@dg.asset(
    # Its output is its metadata and data version; its check keeps the engines' summaries in a memo.
    metadata=outputs_metadata(folders=["memos/sample_engines_agree"]),
    group_name="samples",
    deps=[occurrence_sample],
    automation_condition=REFRESH_WHEN_INPUTS_CHANGE,
    code_version=f"summary-v{SUMMARY_VERSION}",
    description="The course's summary of occurrence_sample: records, species and "
    "md5(string_agg(id::text, ',' ORDER BY id)) of the picked ids.",
)
def occurrence_sample_summary(context: dg.AssetExecutionContext, warehouse: Warehouse) -> PartitionEvents:
    with warehouse.connect() as conn:
        outcome, summary = refresh_sample_summary(conn, run_id=context.run.run_id)
    yield from report_asset(
        context,
        outcome_report(
            outcome,
            records=summary.records,
            species=summary.species,
            ids_md5=summary.ids_md5,
            summary=summary.line(),
        ),
    )


@dg.asset_check(
    asset=occurrence_sample_summary,
    description="PostGIS, DuckDB and plain Python give the same sample count and ids md5. Over the same "
    "inputs (the sample's job keys, the derived files' bytes, the rules) it reports the summaries it found "
    "for them, kept in data/memos/sample_engines_agree/.",
)
def sample_engines_agree(warehouse: Warehouse, paths: DataPaths) -> dg.AssetCheckResult:
    derived_paths = {species.slug: paths.derived(species.slug) for species in load_registry()}
    memo_path = paths.memo(ENGINES_CHECK, WHOLE_TARGET)
    with warehouse.connect() as conn:
        rules = recorded_rules(conn, derived_paths)
        inputs_key = engines_inputs_key(conn, OCCURRENCE_SAMPLE.name, rules)
        kept = kept_agreement(memo_path, inputs_key)
        if kept is not None:
            return dg.AssetCheckResult(
                passed=bool(kept["passed"]),
                metadata={
                    **kept["summaries"],
                    "inputs": "unchanged since an earlier check: its summaries reused",
                },
            )
        summaries = engine_summaries(conn, rules)
    lines = {engine: summary.line() for engine, summary in summaries.items()}
    agree = len({(s.records, s.ids_md5) for s in summaries.values()}) == 1
    keep_agreement(memo_path, inputs_key, agree, lines)
    return dg.AssetCheckResult(passed=agree, metadata=lines)
