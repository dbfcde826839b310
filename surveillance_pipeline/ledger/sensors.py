"""The batches sensor: a new (or corrected) file in data/batches/ -> its day as a partition (when it is not
one yet) and a run for that partition.

Launch-level skip: a file whose sha256 the warehouse's batch ledger has applied requests nothing (the
ledger is what the asset itself decides by, so the sensor and the asset agree whatever Dagster's event
log holds). The run key is the day plus the sha256, so each distinct batch is requested once.
"""

import dagster as dg

from surveillance_pipeline.core.day_files import is_day_file_name
from surveillance_pipeline.core.keys import sha256_file
from surveillance_pipeline.ledger.assets import occurrence_batches
from surveillance_pipeline.ledger.batches import applied_checksums
from surveillance_pipeline.ledger.feed import OCCURRENCE_FEED
from surveillance_pipeline.orchestration.partitions import batch_days
from surveillance_pipeline.orchestration.resources import DataPaths, Warehouse


@dg.sensor(
    target=occurrence_batches,
    default_status=dg.DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=10,
    description="A new or corrected data/batches/<day>.csv -> its day as a partition of occurrence_batches "
    "and a run for it.",
)
def batches_sensor(
    context: dg.SensorEvaluationContext, paths: DataPaths, warehouse: Warehouse
) -> dg.SensorResult:
    requests, notes, new_days = [], [], []
    with warehouse.connect() as conn:
        applied = applied_checksums(conn, OCCURRENCE_FEED.name)
    known_days = set(batch_days.get_partition_keys(dynamic_partitions_store=context.instance))
    for path in sorted(paths.batches().glob("*.csv")):
        if not is_day_file_name(path.name):
            notes.append(f"{path.name}: not named by a day (YYYY-MM-DD.csv)")
            continue
        day = path.stem
        if day not in known_days:
            new_days.append(day)
        checksum = sha256_file(path)
        if checksum in applied:
            continue
        requests.append(dg.RunRequest(run_key=f"{day}|{checksum}", partition_key=day))
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[batch_days.build_add_request(new_days)] if new_days else None,
        skip_reason=None if requests else "; ".join(["nothing changed", *notes]),
    )
