"""The Celery app a worker runs: `celery -A surveillance_pipeline.celery_worker_app worker` (make workers).

It registers dagster-celery's step task with the settings the executor uses (distributed.py), built from
the worker's own environment: REDIS_URL, the warehouse and Dagster storage variables, SURVEILLANCE_DATA_DIR.
A worker loads the code location itself for each step (from the run's origin), so nothing in it depends on
the process that launched the run.
"""

import os

from dagster_celery.executor import CeleryExecutor
from dagster_celery.make_app import make_app
from dagster_celery.tasks import create_task

from surveillance_pipeline.distributed import STEP_WORKER_VARIABLE, celery_settings, redis_url

# Read by Warehouse: a step executed here must not claim the run as this process's (run_health.py).
os.environ[STEP_WORKER_VARIABLE] = "1"
app = make_app(
    CeleryExecutor.for_cli(
        broker=redis_url(), backend=redis_url(), config_source=celery_settings()
    ).app_args()
)
execute_plan = create_task(app)
