"""sample_export and devil_snapshot_export: the same bytes on every re-run, with a sha256 manifest."""

import csv
import itertools
import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dagster as dg
import psycopg

from surveillance_pipeline.core.figures import histogram_png, kept_figure, markdown_image
from surveillance_pipeline.core.keys import JobKeyParts, sha256_file
from surveillance_pipeline.core.partition_files import recover_partition_folder
from surveillance_pipeline.core.refresh import WHOLE_TARGET, report_derived_output
from surveillance_pipeline.core.statistics import StatisticsBeforeUse
from surveillance_pipeline.orchestration.automation import REFRESH_WHEN_INPUTS_CHANGE
from surveillance_pipeline.orchestration.distributed import partitions_side_by_side
from surveillance_pipeline.orchestration.outputs import outputs_metadata
from surveillance_pipeline.orchestration.partitions import species_asset
from surveillance_pipeline.orchestration.reporting import (
    DATA_VERSION_TAG,
    PartitionEvents,
    PartitionReport,
    outcome_report,
    partition_threads,
    report_asset,
    report_partitions,
)
from surveillance_pipeline.orchestration.resources import (
    DataPaths,
    GbifAccount,
    GbifSource,
    ReleaseMasking,
    ThreadConnections,
    Warehouse,
)
from surveillance_pipeline.quality.flags import OCCURRENCE_QUALITY
from surveillance_pipeline.quality.rules import POLICY_ANY_ENABLED
from surveillance_pipeline.releases import quality_report as quality_report_export
from surveillance_pipeline.releases.build import (
    DEFAULT_EXPORT_POLICY,
    EXPORT_VERSION,
    BuiltExport,
    build_devil_snapshot_export,
    build_sample_export,
    devil_snapshot_export_input,
    export_if_changed,
    sample_export_input,
)
from surveillance_pipeline.releases.exports import (
    EXPORT_FORMAT,
    MANIFEST,
    export_is_current,
    manifest_rows,
    publish_export,
)
from surveillance_pipeline.releases.masking import (
    DEFAULT_MAX_M,
    DEFAULT_MIN_M,
    MASKING_VERSION,
    MaskingRules,
    displacement_edges,
    held_release_inputs,
    release_masked_partition,
)
from surveillance_pipeline.releases.masking import STAGE as MASKED_RELEASE
from surveillance_pipeline.releases.registration import register_export
from surveillance_pipeline.releases.replay import replay_masked_release as replay_from_provenance


class ExportConfig(dg.Config):
    """Which records an export releases: the release policy over occurrence_quality's flags."""

    # drop_any_flagged: every record no enabled quality test flagged (as the masked release); keep_all.
    policy: str = DEFAULT_EXPORT_POLICY


def _export(
    context: dg.AssetExecutionContext,
    warehouse: Warehouse,
    paths: DataPaths,
    name: str,
    parts_of: Callable[[psycopg.Connection], JobKeyParts],
    build: Callable[[psycopg.Connection], BuiltExport],
) -> PartitionEvents:
    folder = paths.exports(name)
    with warehouse.connect() as conn:
        parts, built = export_if_changed(conn, folder, parts_of, build)
        rows = built.files[0].rows if built else manifest_rows(folder)
        policy = manifest_policy(folder)
        outcome = report_derived_output(
            conn,
            asset=f"{name}_export",
            partition_key=WHOLE_TARGET,
            parts=parts,
            rows=rows,
            run_id=context.run.run_id,
            unchanged=built is None,
        )
    yield from report_asset(
        context,
        outcome_report(
            outcome,
            folder=dg.MetadataValue.path(str(folder)),
            manifest_sha256=sha256_file(folder / MANIFEST),
            order="ORDER BY id",
            policy=str(policy.get("name", "")),
            excluded=int(policy.get("excluded", 0)),
            first_rows=first_rows(folder / f"{name}.csv"),
        ),
    )


def manifest_policy(folder: Path) -> dict[str, Any]:
    """The policy block of an export's manifest (what it applied and excluded)."""
    policy = json.loads((folder / MANIFEST).read_bytes()).get("policy", {})
    return policy if isinstance(policy, dict) else {}


FIRST_ROWS = 10


def first_rows(path: Path, count: int = FIRST_ROWS) -> dg.TableMetadataValue:
    """The export's first rows as the UI's table (every value as the file's text)."""
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader)
        rows = [dict(zip(header, row, strict=True)) for row in itertools.islice(reader, count)]
    return dg.MetadataValue.table(
        records=[dg.TableRecord(row) for row in rows],
        schema=dg.TableSchema(columns=[dg.TableColumn(name, "string") for name in header]),
    )


# What acts on the outside world: launched on purpose, never by make run, automation or a bulk selection.
PUBLISHING_GROUP = "publishing"

EXPORT_ASSET: dict[str, Any] = {
    "group_name": "releases",
    "code_version": f"export-v{EXPORT_VERSION}.format-v{EXPORT_FORMAT}",
    "automation_condition": REFRESH_WHEN_INPUTS_CHANGE,
}


@dg.asset(
    metadata=outputs_metadata(folders=["exports/sample"]),
    **EXPORT_ASSET,
    # Other domains' assets are named by key: a domain imports no other domain's asset objects.
    deps=[dg.AssetKey("occurrence_sample_summary"), dg.AssetKey("occurrence_quality")],
    pool="sample_export",
    description="data/exports/sample/: the sample's records its policy keeps (default: those no quality "
    "test flagged), as sample.csv and sample.parquet (GeoParquet) ordered by id, and manifest.json with "
    "each file's sha256, rows, the job key they came from and the policy with what it excluded.",
)
def sample_export(
    context: dg.AssetExecutionContext, config: ExportConfig, warehouse: Warehouse, paths: DataPaths
) -> PartitionEvents:
    yield from _export(
        context,
        warehouse,
        paths,
        "sample",
        lambda conn: sample_export_input(conn, config.policy).parts,
        lambda conn: build_sample_export(conn, config.policy),
    )


@dg.asset(
    metadata=outputs_metadata(folders=["exports/devil_snapshot"]),
    **EXPORT_ASSET,
    deps=[dg.AssetKey("devil_snapshot"), dg.AssetKey("occurrence_quality")],
    pool="devil_snapshot_export",
    description="data/exports/devil_snapshot/: devil_snapshot's rows its policy keeps (default: those no "
    "quality test flagged in the devil's occurrence_quality partition), as devil_snapshot.csv and .parquet "
    "ordered by id, and manifest.json with the policy and what it excluded.",
)
def devil_snapshot_export(
    context: dg.AssetExecutionContext, config: ExportConfig, warehouse: Warehouse, paths: DataPaths
) -> PartitionEvents:
    yield from _export(
        context,
        warehouse,
        paths,
        "devil_snapshot",
        lambda conn: devil_snapshot_export_input(conn, config.policy).parts,
        lambda conn: build_devil_snapshot_export(conn, config.policy),
    )


class RegistrationConfig(dg.Config):
    """Publishing is deliberate: the launch must say ``publish`` (no default), and only true posts."""

    publish: bool
    source_url_base: str = ""
    title: str = "md5-capped sample of Tasmanian species occurrences"
    # The export's policy (default: leave out what a quality test flagged) is named in its manifest.
    description: str = (
        "The first 100 GBIF occurrence records per species ordered by md5(id::text), then id, less those "
        "a quality test flagged (manifest.json names the policy and the tests)."
    )


# Registering mints a DOI at GBIF, so no bulk launch may reach it: not "Materialize all" or "Materialize
# unsynced", not a backfill of its group, not automation. Any materializable asset can be selected by all
# of those (AssetSelection.all() and group selections resolve to every materializable key), so the
# registration is an external asset instead: it stays in the graph under the name users know, downstream
# of sample_export, but nothing in Dagster can materialize it. Its materializations are reported by the op
# job register_derived_dataset, launched on purpose with `publish: true` (test_publishing pins this).
derived_dataset_registration = dg.AssetSpec(
    "derived_dataset_registration",
    deps=[sample_export],
    group_name=PUBLISHING_GROUP,
    metadata=outputs_metadata(tables=["external_calls"]),
    description="The sample export registered with GBIF as a derived dataset (a DOI), at most once per "
    "manifest sha256; a lost answer is reconciled from the account's listing, never posted again. "
    "Reported by the register_derived_dataset job only.",
)


@dg.op(
    pool="derived_dataset_registration",
    description="Register the sample export with GBIF (mints a DOI) when publish is true, and report the "
    "derived_dataset_registration asset's materialization.",
)
def register_derived_dataset_op(
    context: dg.OpExecutionContext,
    config: RegistrationConfig,
    warehouse: Warehouse,
    paths: DataPaths,
    gbif: GbifSource,
    gbif_account: GbifAccount,
) -> None:
    if not config.publish:
        # Nothing registered, so nothing reported: the asset's latest materialization stays the DOI.
        context.log.info("derived_dataset_registration: skipped, publish is false")
        return
    if not config.source_url_base:
        raise dg.Failure("derived_dataset_registration: set source_url_base, where the release is served")
    with warehouse.connect() as conn:
        outcome, source_url = register_export(
            conn,
            gbif.api(),
            gbif_account.credentials(),
            export_folder=paths.exports("sample"),
            raw_folder=Path(paths.root) / "raw",
            source_url_base=config.source_url_base,
            title=config.title,
            description=config.description,
        )
    action = "called" if outcome.called else ("adopted" if outcome.adopted else "skipped")
    doi = outcome.response.get("doi", "")
    context.log_event(
        dg.AssetMaterialization(
            asset_key=derived_dataset_registration.key,
            description=action,
            metadata={"action": action, "doi": doi, "source_url": source_url},
            tags={DATA_VERSION_TAG: doi},
        )
    )


@dg.job(description="Publish: register the sample export with GBIF as a derived dataset (a DOI).")
def register_derived_dataset() -> None:
    register_derived_dataset_op()


class MaskedReleaseConfig(dg.Config):
    """The donut each point is moved within, in geodesic metres (WGS84), and the release policy over the
    quality flags (drop_any_flagged: leave out what any enabled test flags; keep_all): enter the job key."""

    min_m: float = DEFAULT_MIN_M
    max_m: float = DEFAULT_MAX_M
    policy: str = POLICY_ANY_ENABLED


@species_asset(
    group_name="releases",
    deps=[dg.AssetKey("occurrences"), dg.AssetKey("occurrence_quality")],
    metadata=outputs_metadata(
        folders=[MASKED_RELEASE, f"figures/{MASKED_RELEASE}", f"memos/{MASKED_RELEASE}"]
    ),
    code_version=f"masking-v{MASKING_VERSION}.format-v{EXPORT_FORMAT}",
    pool=MASKED_RELEASE,
    description="data/masked_release/<slug>/: the species' occurrences, each point moved between min_m and "
    "max_m metres in a random direction (donut geomasking), as CSV, GeoParquet and manifest.json. The "
    "move is drawn from each record's gbifID under the release masking key (RELEASE_MASKING_KEY, a "
    "secret; its id in metadata, manifest and provenance), so the key's holder can `replay` a release byte "
    "for byte, no reader can undo it, and a record keeps its masked point from release to release. The "
    "release policy "
    "(config) leaves out the records occurrence_quality flags; the manifest names each test's version, "
    "parameters and count.",
)
def masked_release(
    context: dg.AssetExecutionContext,
    config: MaskedReleaseConfig,
    warehouse: Warehouse,
    paths: DataPaths,
    masking: ReleaseMasking,
) -> PartitionEvents:
    rules = MaskingRules(min_m=config.min_m, max_m=config.max_m, policy=config.policy)
    key = masking.seed_key()
    # A release is mostly work outside the interpreter's lock (the warehouse's reads, pyproj's geodesics,
    # Arrow's writers): two species at once use both cores.
    side_by_side = partitions_side_by_side()
    with ThreadConnections.for_partitions(
        warehouse, partition_threads(context.partition_keys, side_by_side), this_thread_too=True
    ) as connections:
        held = held_release_inputs(connections.get())
        statistics = StatisticsBeforeUse(warehouse.connect, OCCURRENCE_QUALITY.name)

        def release_partition(slug: str) -> PartitionReport:
            conn = connections.get()
            folder = paths.partition(MASKED_RELEASE, slug)
            outcome, release = release_masked_partition(
                conn,
                slug=slug,
                rules=rules,
                folder=folder,
                run_id=context.run.run_id,
                key=key,
                stamps=paths.memo(MASKED_RELEASE, slug),
                held=held,
                statistics=statistics,
            )
            counts = release.displacement_counts

            def draw() -> bytes | None:
                if not counts:
                    return None
                edges = displacement_edges(rules)
                return histogram_png(edges, counts, "displacement (m)", f"{slug}: points moved")

            figure = kept_figure(paths.figures(MASKED_RELEASE), slug, outcome.job_key, draw)
            histogram: dict[str, Any] = (
                {"displacement": dg.MetadataValue.md(markdown_image(figure, "displacement"))}
                if figure
                else {}
            )
            return outcome_report(
                outcome,
                None,
                **histogram,
                folder=dg.MetadataValue.path(str(folder)),
                masking_key_id=key.id,
                logical_run_id=release.logical_run_id,
                manifest_sha256=release.manifest_sha256,
                policy=rules.policy,
                excluded=release.excluded,
            )

        yield from report_partitions(context, release_partition, side_by_side=side_by_side)
        if statistics.analyzed_seconds is not None:
            context.log.info(
                f"masked_release: occurrence_quality's statistics were stale before the first build; "
                f"analyzed in {statistics.analyzed_seconds:.1f} s"
            )


class ReplayConfig(dg.Config):
    """Which provenance row to replay, and the scratch folder (default: a new temporary folder)."""

    provenance_id: int
    into: str = ""


@dg.op(description="Regenerate a masked release from its provenance row; fail unless the sha256 matches.")
def replay_masked_release_op(
    context: dg.OpExecutionContext, config: ReplayConfig, warehouse: Warehouse, masking: ReleaseMasking
) -> dg.Output[str]:
    into = Path(config.into) if config.into else Path(tempfile.mkdtemp(prefix="replay_")) / "release"
    with warehouse.connect() as conn:
        result = replay_from_provenance(conn, config.provenance_id, into, masking.seed_key())
    metadata = {
        "partition": result.partition_key,
        "masking_key_id": result.masking_key_id,
        "recorded_manifest_sha256": result.recorded_manifest_sha256,
        "replayed_manifest_sha256": result.replayed_manifest_sha256,
        "folder": str(result.folder),
    }
    if not result.equal:
        raise dg.Failure(f"replay of provenance {config.provenance_id} differs", metadata=metadata)
    context.log.info(f"replay of provenance {config.provenance_id}: manifest sha256 equal")
    return dg.Output(result.replayed_manifest_sha256, metadata=metadata)


@dg.job(description="Replay a masked release from a provenance row into a scratch folder, byte for byte.")
def replay_masked_release() -> None:
    replay_masked_release_op()


@dg.asset(
    metadata=outputs_metadata(folders=[f"exports/{quality_report_export.REPORT}"]),
    group_name="releases",
    deps=[dg.AssetKey("occurrence_quality")],
    code_version=f"report-v{quality_report_export.REPORT_VERSION}.format-v{EXPORT_FORMAT}",
    automation_condition=REFRESH_WHEN_INPUTS_CHANGE,
    pool=quality_report_export.REPORT,
    description="data/exports/quality_report/: quality_report.md (the tests with their versions, "
    "parameters and sources; per species the records each test flagged and was first to flag) and "
    "quality_counts.csv, with manifest.json. Rewritten only when a partition's flags or parameters changed.",
)
def quality_report(
    context: dg.AssetExecutionContext, warehouse: Warehouse, paths: DataPaths
) -> PartitionEvents:
    folder = paths.exports(quality_report_export.REPORT)
    with warehouse.connect() as conn:
        recover_partition_folder(folder)
        parts = quality_report_export.report_parts(conn)
        built = None
        if not export_is_current(folder, parts.key):
            parts, files = quality_report_export.build_report(conn)
            publish_export(folder, files, parts, quality_report_export.ORDER)
            built = files
        outcome = report_derived_output(
            conn,
            asset=quality_report_export.REPORT,
            partition_key=WHOLE_TARGET,
            parts=parts,
            rows=built[0].rows if built else manifest_rows(folder),
            run_id=context.run.run_id,
            unchanged=built is None,
        )
    yield from report_asset(
        context,
        outcome_report(
            outcome,
            report=dg.MetadataValue.path(str(folder / f"{quality_report_export.REPORT}.md")),
            manifest_sha256=sha256_file(folder / MANIFEST),
        ),
    )
