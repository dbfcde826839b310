"""Records per species, so make run under the distributed profile can split the species by work. Dagster-free.

make run's first process weighs the species in a process forked before it imports Dagster (make_run.py);
run.py weighs them the same way, from its definitions' resources, when that process was not started or
was started with another plan.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from surveillance_pipeline.core.data_folder import DataFolder
from surveillance_pipeline.core.errors import InputError
from surveillance_pipeline.core.forked import ForkedWork, ForkedWorkError
from surveillance_pipeline.core.settings import (
    DATA_DIR_VARIABLE,
    GBIF_SOURCE_VARIABLE,
    VERIFY_TARGETS_VARIABLE,
)
from surveillance_pipeline.gbif.client import DOWNLOAD_SOURCE, LAB_SOURCE
from surveillance_pipeline.gbif.download_index import open_downloads
from surveillance_pipeline.gbif.registry import load_registry


@dataclass(frozen=True)
class WeighingPlan:
    """What the weights are read from: the GBIF source, the data folder (its downloads and their index),
    and whether the zips' stamps may stand for their sha256 (not under make repair, which reads them)."""

    source: str
    folder: DataFolder
    trust_stamps: bool


def plan_from_settings(settings: Mapping[str, str]) -> WeighingPlan:
    """The plan the code location's resources give, from the settings they are built from
    (``run_settings.resolve()``, read by definitions.live_resources)."""
    return WeighingPlan(
        source=settings[GBIF_SOURCE_VARIABLE],
        folder=DataFolder(Path(settings[DATA_DIR_VARIABLE])),
        trust_stamps=settings[VERIFY_TARGETS_VARIABLE] != "1",
    )


def weigh_species(plan: WeighingPlan) -> dict[str, int] | None:
    """Records per species that gbif_raw will read; None when nothing says (GBIF's search, which says how
    many only when asked: the split is then by count).

    The lab's come from the registry: each species' ``lab_records``. Split by count, the lab's first 36
    species held 11,281 of its 26,391 records and the other run 15,110, and finished 4.4 s later.

    The downloads' index is built here when it is missing: the same index, built the same way under the
    same lock, that gbif_raw builds and then finds (each version once). A download the index refuses is
    left to gbif_raw, which fails naming its file, line and field; the split is then by count.
    """
    try:
        if plan.source == LAB_SOURCE:
            lab = {species.slug: species.lab_records for species in load_registry()}
            print(
                f"make run: the lab's {sum(lab.values())} records of {len(lab)} species, split over the "
                "workers by records",
                flush=True,
            )
            return lab
        if plan.source != DOWNLOAD_SOURCE:
            return None
        started = time.perf_counter()
        downloads = open_downloads(
            plan.folder.downloads(),
            plan.folder.download_index(),
            load_registry(),
            build=True,
            stamps=plan.folder.download_stamps() if plan.trust_stamps else None,
        )
    except (InputError, OSError, ValueError):
        return None  # gbif_raw's step says what is wrong (a bad download, a bad registry, a full disk)
    weights: Counter[str] = Counter()
    for index in downloads.indexes:
        for slug, part in (index.parts if index is not None else {}).items():
            weights[slug] += part.records
    print(
        f"make run: {len(downloads.downloads)} download(s) indexed, {sum(weights.values())} records of "
        f"{len(weights)} species, split over the workers by records ({time.perf_counter() - started:.1f} s)",
        flush=True,
    )
    return dict(weights)


class ForkedWeights:
    """``weigh_species(plan)`` in a forked process, beside whatever this one does meanwhile.

    The index of a 600,000-record download is 4-5 s of both cores before any species run can start. In a
    thread of make run's process it shared the interpreter with the observation's run; forked after make
    run's imports it began 1.3 s in (Dagster and the code location, one core); forked before them
    (make_run.py), it begins at once.
    """

    def __init__(self, plan: WeighingPlan) -> None:
        sys.stdout.flush()  # or the child would print what this process had not yet
        sys.stderr.flush()
        self.plan = plan
        self._work: ForkedWork[dict[str, int] | None] | None = ForkedWork(weigh_species, (plan,))
        self._weights: dict[str, int] | None = None

    def result(self) -> dict[str, int] | None:
        """The weights (None to split by count). Waits for the process the first time; main calls it
        again on its way out, so a run that ended first (a failed observation) leaves no process behind."""
        if self._work is not None:
            work, self._work = self._work, None
            try:
                self._weights = work.result()
            except ForkedWorkError as error:
                # The species runs' gbif_raw then says what is wrong, as when the index refuses a download.
                print(f"make run: the species were not weighed ({error}): split by count", file=sys.stderr)
        return self._weights

    def abandon(self) -> None:
        """End the process unheard (make run weighs by another plan)."""
        if self._work is not None:
            self._work.abandon()
            self._work = None
