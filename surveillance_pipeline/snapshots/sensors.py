"""The deliveries sensor: a new or changed delivery -> observe it, and run its snapshot only if the key moves.

The would-be job key is computed here exactly as the asset will compute it (the delivery's sha256, the
current transform and schema versions, the checked-in config); when it equals the key the warehouse's own
state row says the snapshot holds, nothing is requested. The warehouse, not Dagster's event log, is the
truth the asset uses: two warehouses, or an instance that did not see a load, cannot mislead the sensor.
Run keys carry a trigger counter kept in the cursor, so a return to an earlier delivery (A, B, A) is a
new trigger, not a duplicate Dagster would drop forever.
"""

import json
from dataclasses import dataclass

import dagster as dg

from surveillance_pipeline.core.errors import InputError
from surveillance_pipeline.core.refresh import WHOLE_TARGET, held_job_key
from surveillance_pipeline.orchestration.reporting import DATA_VERSION_TAG
from surveillance_pipeline.orchestration.resources import DataPaths, Warehouse
from surveillance_pipeline.orchestration.run_config import op_config, run_config_for
from surveillance_pipeline.snapshots import devil
from surveillance_pipeline.snapshots.assets import DevilSnapshotConfig, devil_delivery, devil_snapshot
from surveillance_pipeline.snapshots.deliveries import newest_delivery, read_delivery


@dataclass(frozen=True)
class SnapshotTarget:
    """A species whose deliveries feed a snapshot asset."""

    slug: str
    source: dg.AssetKey
    snapshot: dg.AssetsDefinition

    def would_be_key(self, delivery) -> str:
        config = DevilSnapshotConfig(**op_config(self.snapshot.key.to_user_string()))
        return devil.snapshot_job_parts(delivery, config.rules(), devil.snapshot_target()).key


SNAPSHOT_TARGETS = (SnapshotTarget(devil.DEVIL_SLUG, devil_delivery.key, devil_snapshot),)


@dg.sensor(
    target=dg.AssetSelection.assets(*(t.snapshot for t in SNAPSHOT_TARGETS)),
    default_status=dg.DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=10,
    description="A new or changed file under data/deliveries/<species>/ -> its snapshot, "
    "when the job key moves.",
)
def deliveries_sensor(
    context: dg.SensorEvaluationContext, paths: DataPaths, warehouse: Warehouse
) -> dg.SensorResult:
    cursor = json.loads(context.cursor) if context.cursor else {}
    run_requests, observations, skipped = [], [], []
    for target in SNAPSHOT_TARGETS:
        path = newest_delivery(paths.deliveries(target.slug))
        if path is None:
            skipped.append(f"{target.slug}: no delivery")
            continue
        try:
            delivery = read_delivery(path)
        except InputError as error:
            skipped.append(f"{target.slug}: {error}")
            continue
        seen = cursor.get(target.slug, {})
        if seen.get("file") != path.name or seen.get("sha256") != delivery.sha256:
            trigger = seen.get("trigger", 0) + 1
            cursor[target.slug] = {"file": path.name, "sha256": delivery.sha256, "trigger": trigger}
            observations.append(
                dg.AssetObservation(
                    asset_key=target.source,
                    metadata={"file": path.name, "rows": delivery.rows},
                    tags={DATA_VERSION_TAG: delivery.sha256},
                )
            )
        key = target.would_be_key(delivery)
        with warehouse.connect() as conn:
            held = held_job_key(conn, devil.DEVIL_SNAPSHOT.name, WHOLE_TARGET)
        if key == held:
            skipped.append(
                f"{target.slug}: nothing changed ({path.name} is what {target.snapshot.key.path[-1]} holds)"
            )
            continue
        trigger = cursor[target.slug]["trigger"]
        run_requests.append(
            dg.RunRequest(
                run_key=f"{target.slug}|{key}|{trigger}",
                asset_selection=[target.snapshot.key],
                run_config=run_config_for([target.snapshot.key.to_user_string()]),
                tags={"surveillance/delivery": path.name},
            )
        )
    return dg.SensorResult(
        run_requests=run_requests,
        skip_reason=None if run_requests else "; ".join(skipped) or "nothing changed",
        cursor=json.dumps(cursor, sort_keys=True),
        asset_events=observations,
    )
