"""``make run``'s process: under the distributed profile, the species weighed from its first instant; then
the runs (run.py).

make run splits the species over the workers by the records each has, and for GBIF downloads that means
the downloads' index: 4-5 s of both cores at 600,000 records, which no species run can start before.
Forked from run.py it began after run.py's imports (Dagster and the code location, 1.3 s of one core);
forked here, by a process that has imported only the Dagster-free core, it begins at once and the imports
go on beside it. Its plan comes from the settings the code location's resources are built from
(run_settings.resolve(), as definitions.live_resources reads them); run.main compares it with the
definitions' own and weighs again when they differ.
"""

from __future__ import annotations

import time

from surveillance_pipeline.commands import exit_process
from surveillance_pipeline.commands.species_weights import ForkedWeights, plan_from_settings
from surveillance_pipeline.core.settings import is_distributed
from surveillance_pipeline.orchestration import run_settings


def main() -> int:
    started = time.perf_counter()
    early = ForkedWeights(plan_from_settings(run_settings.resolve())) if is_distributed() else None
    # Dagster and the code location: imported only now, beside the weighing.
    from surveillance_pipeline.commands import run  # noqa: PLC0415

    return run.main(early, started)


if __name__ == "__main__":
    exit_process(main())
