"""One process of the bench's parallel backfill: ``gbif_derived`` and ``occurrences`` over first..last.

Several of these run at once, each on a disjoint range of species partitions, against one Dagster
instance (``DAGSTER_HOME``) and one warehouse (``SURVEILLANCE_DATABASE_URL``). Prints the run id.
"""

from __future__ import annotations

import json
import os
import sys

import dagster as dg

from surveillance_pipeline.core.settings import DATABASE_URL_VARIABLE, data_dir
from surveillance_pipeline.lab.districts import lab_layer_path
from surveillance_pipeline.occurrences.assets import gbif_derived, occurrences
from surveillance_pipeline.orchestration.reporting import partition_range_tags
from surveillance_pipeline.orchestration.resources import DataPaths, Warehouse
from surveillance_pipeline.orchestration.run_config import QUIET_CONSOLE


def main(first: str, last: str) -> int:
    with dg.DagsterInstance.get() as instance:
        result = dg.materialize(
            [gbif_derived, occurrences],
            instance=instance,
            resources={
                "warehouse": Warehouse(database_url=os.environ[DATABASE_URL_VARIABLE]),
                "paths": DataPaths(root=str(data_dir()), region_layer=str(lab_layer_path())),
            },
            tags=partition_range_tags(first, last),
            run_config=QUIET_CONSOLE,
            raise_on_error=False,
        )
    print(json.dumps({"run_id": result.run_id, "success": result.success}))
    return 0 if result.success else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1], sys.argv[2]))
