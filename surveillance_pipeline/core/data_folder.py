"""Where each kind of file lives in the data folder (SURVEILLANCE_DATA_DIR). Dagster-free.

The ``paths`` resource (orchestration/resources.py: DataPaths) hands this layout to the assets; make run's
first process, which weighs the species before it imports Dagster (commands/make_run.py), reads the same
one. One layout, so both find the same downloads and the same index.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class DataFolder:
    """The folder every file asset writes under (raw, derived, deliveries, batches, downloads, exports)."""

    root: Path

    def raw(self, slug: str) -> Path:
        return self.root / "raw" / f"{slug}.json"

    def derived(self, slug: str) -> Path:
        return self.root / "derived" / f"{slug}.csv"

    def deliveries(self, slug: str) -> Path:
        return self.root / "deliveries" / slug

    def batches(self) -> Path:
        return self.root / "batches"

    def downloads(self) -> Path:
        """Where a user drops GBIF download zips (DwC-A or simple CSV)."""
        return self.root / "downloads"

    def download_stamps(self) -> Path:
        """``data/memos/gbif_downloads/zips.stamps.json``: each zip's stamp with its sha256, so an
        unchanged download is not read again to learn its sha256 (gbif.download_index.open_downloads)."""
        return self.stamps("gbif_downloads", "zips")

    def download_index(self) -> Path:
        """What each download version holds per species (gbif.download_index), built by gbif_raw."""
        return self.root / "download_index"

    def exports(self, name: str) -> Path:
        return self.root / "exports" / name

    def figures(self, asset: str) -> Path:
        """``data/figures/<asset>/``: the pictures an asset shows in the UI (never an input)."""
        return self.root / "figures" / asset

    def memo(self, asset: str, partition_key: str) -> Path:
        """``data/memos/<asset>/<partition>.json``: what an asset keeps to decide a skip cheaply (never an
        input: a missing or stale memo costs time, not a row)."""
        return self.root / "memos" / asset / f"{partition_key}.json"

    def stamps(self, asset: str, partition_key: str) -> Path:
        """``data/memos/<asset>/<partition>.stamps.json``: the stamps of the files a skip of the partition
        checks, with their sha256s (core.partition_files.sha256_file_stamped)."""
        return self.memo(asset, f"{partition_key}.stamps")

    def partition(self, asset: str, partition_key: str) -> Path:
        """``data/<asset>/<partition>/``: a partition's files, replaced whole (core.partition_files)."""
        return self.root / asset / partition_key
