"""The code location: merges each domain's definitions, adds jobs, the schedule and the automation sensor,
binds resources, and sets what it loaded aside from the cycle collector. Nothing else."""

import os
from typing import Any

import dagster as dg

from surveillance_pipeline.core.long_lived import set_aside_long_lived_objects
from surveillance_pipeline.core.settings import (
    DATA_DIR_VARIABLE,
    DATABASE_URL_VARIABLE,
    GBIF_BASE_URL_VARIABLE,
    GBIF_FALLBACK_SOURCE_VARIABLE,
    GBIF_SOURCE_VARIABLE,
    GEOCODER_LEDGER_SALT_VARIABLE,
    GEOCODER_REQUESTS_PER_SECOND_VARIABLE,
    GEOCODER_URL_VARIABLE,
    GEOCODER_VARIABLE,
    RELEASE_MASKING_KEY_VARIABLE,
    VERIFY_TARGETS_VARIABLE,
)
from surveillance_pipeline.gbif.client import LAB_SOURCE
from surveillance_pipeline.geocoding.service import DEFAULT_REQUESTS_PER_SECOND, LAB_GEOCODER
from surveillance_pipeline.lab.districts import lab_layer_path
from surveillance_pipeline.lab.resources import LabGbifSource, LabGeocoderSource
from surveillance_pipeline.ledger import definitions as ledger
from surveillance_pipeline.ledger.feed import OCCURRENCE_FEED
from surveillance_pipeline.occurrences import definitions as occurrences
from surveillance_pipeline.occurrences.load import OCCURRENCES
from surveillance_pipeline.occurrences.schedules import weekly_ingest_schedule
from surveillance_pipeline.occurrences.sensors import downloads_sensor
from surveillance_pipeline.orchestration import run_settings
from surveillance_pipeline.orchestration.automation import automation_sensor
from surveillance_pipeline.orchestration.distributed import executor
from surveillance_pipeline.orchestration.jobs import SPECIES_ASSETS_JOB, jobs_for
from surveillance_pipeline.orchestration.resources import (
    DataPaths,
    GbifAccount,
    GbifSource,
    GeocoderSource,
    ReleaseMasking,
    Warehouse,
)
from surveillance_pipeline.orchestration.run_health import dead_runs_sensor
from surveillance_pipeline.orchestration.verification import (
    TableTarget,
    noted_edits_sensor,
    target_checks,
    verify_job,
    verify_schedule,
)
from surveillance_pipeline.places import definitions as places
from surveillance_pipeline.places.geocoded import GEOCODED_LOCALITIES
from surveillance_pipeline.places.regions import REGION_ASSIGNMENT, REGIONS
from surveillance_pipeline.planning.job import plan_next_run
from surveillance_pipeline.planning.sync_checks import partitions_in_sync, report_partitions_in_sync
from surveillance_pipeline.quality import definitions as quality
from surveillance_pipeline.quality.flags import OCCURRENCE_QUALITY
from surveillance_pipeline.quality.references import QUALITY_REFERENCES
from surveillance_pipeline.releases import definitions as releases
from surveillance_pipeline.samples import definitions as samples
from surveillance_pipeline.samples.load import OCCURRENCE_SAMPLE
from surveillance_pipeline.snapshots import definitions as snapshots
from surveillance_pipeline.snapshots.devil import snapshot_target

# One process per run by default; Celery workers under SURVEILLANCE_PROFILE=distributed (distributed.py).
EXECUTOR = executor()
DOMAINS = (
    occurrences.defs,
    quality.defs,
    samples.defs,
    snapshots.defs,
    ledger.defs,
    releases.defs,
    places.defs,
)


def table_targets() -> list[TableTarget]:
    """Every table an asset writes under job keys, each verified by a check of its asset."""
    return [
        TableTarget("occurrences", lambda: OCCURRENCES),
        # occurrence_quality loads the reference layers first, then flags: two tables, two checks.
        TableTarget(
            "occurrence_quality", lambda: QUALITY_REFERENCES, "quality_references_table_holds_its_snapshot"
        ),
        TableTarget("occurrence_quality", lambda: OCCURRENCE_QUALITY),
        TableTarget("occurrence_sample", lambda: OCCURRENCE_SAMPLE),
        TableTarget("geocoded_localities", lambda: GEOCODED_LOCALITIES),
        # region_assignment loads the layer into regions first, then assigns: two tables, two checks.
        TableTarget("region_assignment", lambda: REGIONS, "regions_table_holds_its_snapshot"),
        TableTarget("region_assignment", lambda: REGION_ASSIGNMENT),
        # The devil's versions are read when verified: a version bump is the one verified.
        TableTarget("devil_snapshot", snapshot_target),
        TableTarget("occurrence_batches", lambda: OCCURRENCE_FEED),
    ]


def live_resources() -> dict[str, Any]:
    # The data-shaping settings, resolved once: the same resolution a worker's steps compare with the
    # run's (run_settings.py).
    settings = run_settings.resolve()
    gbif_sources = (settings[GBIF_SOURCE_VARIABLE], settings[GBIF_FALLBACK_SOURCE_VARIABLE])
    return {
        # EnvVar is read at run time and shown masked in the UI: the password never sits in the definitions.
        "warehouse": Warehouse(
            database_url=dg.EnvVar(DATABASE_URL_VARIABLE),
            verify_targets=settings[VERIFY_TARGETS_VARIABLE] == "1",
        ),
        "paths": DataPaths(root=settings[DATA_DIR_VARIABLE], region_layer=str(lab_layer_path())),
        # Read only by the runs that publish; a missing variable fails such a run before its first step.
        "gbif_account": GbifAccount(user=dg.EnvVar("GBIF_USER"), password=dg.EnvVar("GBIF_PASSWORD")),
        # The lab's implementations where a setting names the lab; the live ones otherwise.
        "gbif": (LabGbifSource if LAB_SOURCE in gbif_sources else GbifSource)(
            source=settings[GBIF_SOURCE_VARIABLE],
            base_url=settings[GBIF_BASE_URL_VARIABLE],
            fallback=settings[GBIF_FALLBACK_SOURCE_VARIABLE],
        ),
        "geocoder": (LabGeocoderSource if settings[GEOCODER_VARIABLE] == LAB_GEOCODER else GeocoderSource)(
            kind=settings[GEOCODER_VARIABLE],
            base_url=settings[GEOCODER_URL_VARIABLE],
            requests_per_second=float(
                os.environ.get(GEOCODER_REQUESTS_PER_SECOND_VARIABLE, DEFAULT_REQUESTS_PER_SECOND)
            ),
            # A secret: keys the ledger's HMACs. make run (provisioning) writes one into .local/env.sh.
            ledger_salt=dg.EnvVar(GEOCODER_LEDGER_SALT_VARIABLE),
        ),
        # A secret: keys the masked release's draws. make run (provisioning) writes one into .local/env.sh.
        "masking": ReleaseMasking(key=dg.EnvVar(RELEASE_MASKING_KEY_VARIABLE)),
    }


def assemble(resources: dict[str, Any]) -> dg.Definitions:
    """The whole code location over the given resources (tests pass their own database and folders)."""
    defined = [a for domain in DOMAINS for a in (domain.assets or []) if isinstance(a, dg.AssetsDefinition)]
    assets = [a for a in defined if not a.is_observable]
    observable_sources = [a.key for a in defined if a.is_observable]
    checks = target_checks(table_targets())
    # Checks the asset jobs leave out: the verifications scan whole tables (their own job and schedule),
    # and the sync checks plan the next run (their own sensor).
    left_out = [*checks, partitions_in_sync]
    operations = dg.Definitions(
        executor=EXECUTOR,
        asset_checks=left_out,
        jobs=[*jobs_for(assets, observable_sources, left_out), verify_job(checks), plan_next_run],
        schedules=[weekly_ingest_schedule(SPECIES_ASSETS_JOB), verify_schedule()],
        sensors=[
            automation_sensor,
            downloads_sensor(SPECIES_ASSETS_JOB),
            dead_runs_sensor,
            noted_edits_sensor(table_targets()),
            report_partitions_in_sync,
        ],
        resources=resources,
    )
    return dg.Definitions.merge(*DOMAINS, operations)


defs = assemble(live_resources())
# Every process that executes steps loads this module first (make run and its runs, the daemon's run
# workers, the Celery workers): what it loaded lives as long as the process, and the cycle collector's
# full passes over it fell inside steps (core/long_lived.py).
set_aside_long_lived_objects()
