"""occurrence_quality: thin Dagster asset over the quality tests (quality/flags.py, quality/rules.py)."""

import dagster as dg
import psycopg

from surveillance_pipeline.core.figures import bars_png, kept_figure, markdown_image, points_map_png
from surveillance_pipeline.core.fingerprints import verify_every_skip
from surveillance_pipeline.core.statistics import StatisticsBeforeUse
from surveillance_pipeline.gbif.registry import Species, species_by_slug
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
from surveillance_pipeline.orchestration.resources import DataPaths, ThreadConnections, Warehouse
from surveillance_pipeline.quality import flags
from surveillance_pipeline.quality.references import ReferenceLayers, load_quality_references
from surveillance_pipeline.quality.rules import TESTS, QualityRules
from surveillance_pipeline.quality.settings import configured_rules


class OccurrenceQualityConfig(dg.Config):
    """The quality tests' settings, each entering the job key of what it shapes. Unset (null): the quality
    file's value (SURVEILLANCE_QUALITY_FILE), else the default shown in each test's description."""

    enabled_tests: list[str] | None = None
    gbif_issues: list[str] | None = None
    basis_of_record: list[str] | None = None
    uncertainty_limit_m: float | None = None
    uncertainty_placeholders_m: list[float] | None = None
    precision_limit_degrees: float | None = None
    old_before_year: int | None = None
    zero_radius_degrees: float | None = None
    capitals_radius_m: float | None = None
    centroids_radius_m: float | None = None
    gbif_hq_radius_m: float | None = None
    sea_buffer_m: float | None = None
    country_buffer_m: float | None = None
    outliers_multiplier: float | None = None
    outliers_min_records: int | None = None
    outliers_exact_up_to_points: int | None = None
    outliers_cell_degrees: float | None = None

    def rules(self) -> QualityRules:
        return configured_rules(self.model_dump())


COUNTS_SCHEMA = dg.TableSchema(
    columns=[
        dg.TableColumn("test", "string"),
        dg.TableColumn("enabled", "bool"),
        dg.TableColumn("flagged", "int", description="records the test flagged"),
        dg.TableColumn("first_reason", "int", description="records it was the first test to flag"),
        dg.TableColumn("description", "string"),
    ]
)


@species_asset(
    metadata=outputs_metadata(
        tables=["occurrence_quality", "quality_references"],
        folders=["figures/quality", "figures/quality_maps", "memos/occurrence_quality"],
    ),
    group_name="occurrences",
    # The raw snapshot's terms reach it through gbif_derived's data version (the raw snapshot's sha256):
    # a change in gbif_raw makes it Unsynced with occurrences, a level after gbif_derived, never before.
    deps=[dg.AssetKey("occurrences"), dg.AssetKey("gbif_derived")],
    code_version=flags.OCCURRENCE_QUALITY.code_version,
    pool="occurrence_quality",
    description="Per record of occurrences: GBIF's quality terms (basisOfRecord, issues, uncertainty, …) and "
    "one flag per quality test (CoordinateCleaner's and GBIF's), never a dropped row. Tests and thresholds "
    "are config in the job key; the data version is the rows' digest, so a change that flags the same "
    "records reloads nothing downstream.",
)
def occurrence_quality(
    context: dg.AssetExecutionContext, config: OccurrenceQualityConfig, paths: DataPaths, warehouse: Warehouse
) -> PartitionEvents:
    rules = config.rules()
    layers = ReferenceLayers()
    side_by_side = partitions_side_by_side()
    with ThreadConnections.for_partitions(
        warehouse, partition_threads(context.partition_keys, side_by_side), this_thread_too=True
    ) as connections:
        loaded = load_quality_references(connections.get(), layers, context.run.run_id)
        context.log.info(f"quality_references: {loaded.action} ({loaded.reason}), {loaded.rows} pieces")
        held = flags.held_quality_inputs(connections.get())
        statistics = StatisticsBeforeUse(warehouse.connect, flags.OCCURRENCE_QUALITY.name)
        trust_memos = not verify_every_skip(connections.get())  # make repair trusts no memo

        def flag_partition(slug: str) -> PartitionReport:
            conn = connections.get()
            species = species_by_slug(slug)
            outcome = flags.refresh_occurrence_quality(
                conn,
                species=species,
                raw_path=paths.raw(slug),
                rules=rules,
                layers=layers,
                run_id=context.run.run_id,
                held=held,
                statistics=statistics,
                memos=flags.QualityMemos(
                    site_sums=paths.memo(flags.OCCURRENCE_QUALITY.name, f"{slug}.sites").with_suffix(".bin"),
                    term_lines=paths.memo(flags.OCCURRENCE_QUALITY.name, f"{slug}.lines").with_suffix(".bin"),
                    trusted=trust_memos,
                ),
            )
            memo = paths.memo(flags.OCCURRENCE_QUALITY.name, slug)
            counts, version_of_rows = flags.outcome_quality_counts(conn, species, outcome, memo)
            return outcome_report(
                outcome,
                version_of_rows,
                table="occurrence_quality",
                flagged=counts.flagged,
                flagged_share=round(counts.flagged / counts.records, 4) if counts.records else 0.0,
                **{f"flagged_{name}": counts.by_test[name][0] for name in rules.enabled},
                tests=dg.MetadataValue.table(records=_count_records(counts, rules), schema=COUNTS_SCHEMA),
                first_reasons=dg.MetadataValue.md(_first_reasons_chart(paths, slug, outcome.job_key, counts)),
                map=dg.MetadataValue.md(_flagged_map(conn, paths, species, outcome.job_key, counts)),
            )

        yield from report_partitions(context, flag_partition, side_by_side=side_by_side)
        if statistics.analyzed_seconds is not None:
            context.log.info(
                f"occurrence_quality: its statistics were stale before the first delta; analyzed in "
                f"{statistics.analyzed_seconds:.1f} s"
            )


def _count_records(counts: flags.QualityCounts, rules: QualityRules) -> list[dg.TableRecord]:
    return [
        dg.TableRecord(
            {
                "test": test.name,
                "enabled": rules.is_enabled(test.name),
                "flagged": counts.by_test[test.name][0],
                "first_reason": counts.by_test[test.name][1],
                "description": test.description,
            }
        )
        for test in TESTS
    ]


def _flagged_map(
    conn: psycopg.Connection, paths: DataPaths, species: Species, job_key: str, counts: flags.QualityCounts
) -> str:
    """The species' points, those an enabled test flagged in red, within the extent of the others."""

    def draw() -> bytes:
        kept, flagged = flags.flagged_map_cells(conn, species)
        title = f"{species.scientific_name}: {counts.flagged:,} flagged (red)"
        return points_map_png(kept, title, flags.MAP_GRID_DEGREES, flagged)

    png = kept_figure(paths.figures("quality_maps"), species.slug, job_key, draw)
    return markdown_image(png, f"{species.slug}: flagged records in red") if png else ""


def _first_reasons_chart(paths: DataPaths, slug: str, job_key: str, counts: flags.QualityCounts) -> str:
    names = [test.name for test in TESTS]

    def draw() -> bytes:
        return bars_png(
            names,
            [counts.by_test[name][1] for name in names],
            f"{slug}: first reason ({counts.flagged:,} of {counts.records:,})",
        )

    png = kept_figure(paths.figures("quality"), slug, job_key, draw)
    return markdown_image(png, f"{slug}: records by the first test that flagged them") if png else ""
