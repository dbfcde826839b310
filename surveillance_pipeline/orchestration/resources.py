"""Dagster resources: the warehouse connection, the data folder, the GBIF source and the geocoder (lab or
live)."""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import TracebackType

import dagster as dg
import psycopg

from surveillance_pipeline.core.data_folder import DataFolder
from surveillance_pipeline.core.fingerprints import VERIFY_SETTING
from surveillance_pipeline.core.refresh import ensure_state_tables
from surveillance_pipeline.core.seeds import SeedKey
from surveillance_pipeline.core.settings import RELEASE_MASKING_KEY_VARIABLE
from surveillance_pipeline.gbif.api import DEFAULT_BASE_URL, ApiGbifClient, GbifAccountCredentials
from surveillance_pipeline.gbif.client import API_SOURCE, DOWNLOAD_SOURCE, LAB_SOURCE, SOURCES, GbifClient
from surveillance_pipeline.geocoding.service import (
    DEFAULT_GEOCODER_URL,
    DEFAULT_REQUESTS_PER_SECOND,
    HTTP_GEOCODER,
    LAB_GEOCODER,
    USER_AGENT,
    Geocoder,
    HttpGeocoder,
)
from surveillance_pipeline.orchestration import run_settings
from surveillance_pipeline.orchestration.distributed import in_step_worker
from surveillance_pipeline.orchestration.run_health import claim_run_process


def refuse_other_settings(context: dg.InitResourceContext) -> None:
    """In a Celery worker, refuse a step when this process resolves a data-shaping setting otherwise than
    the run's process did (run_settings.py): never a silent difference between the run and its steps.

    Every step passes here: every asset that writes needs the warehouse, every source the data folder.
    """
    if not in_step_worker() or context.run is None:
        return
    recorded = run_settings.from_tags(context.run.tags)
    if recorded is None:
        raise dg.Failure(
            f"run {context.run.run_id} carries no {run_settings.SETTINGS_TAG} tag: its process did not "
            "record the settings it resolved, so this worker cannot tell whether it would write the same; "
            "launch the run again with this version of the code location"
        )
    differing = run_settings.differences(recorded, run_settings.resolve())
    if differing:
        raise dg.Failure(
            f"this worker's settings differ from run {context.run.run_id}'s, so the step would write "
            "something else; start the worker with the run's settings (docs/scaling.md):\n  "
            + "\n  ".join(differing),
            metadata={"differences": "\n".join(differing)},
        )


class Warehouse(dg.ConfigurableResource):
    """The PostGIS database our targets live in. The URL (with its password) comes from the environment."""

    database_url: str
    # Compare every skipped partition's fingerprint with its rows (a scan of each): the repair run after a
    # verification found what the watch could not see (make repair). Not a row-shaping setting: a
    # partition reloads only to the snapshot its key names.
    verify_targets: bool = False

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        # Every pooled step's run sets the warehouse up before its first step claims a pool slot: the
        # moment to give back the slots of runs whose process was killed (run_health says why). Not in a
        # Celery worker: the run's process is the one that sent the step, and a worker that dies takes
        # only its step, which Redis hands to another worker; tagging the run with the worker would have
        # the next run on this host fail it.
        if context.instance is not None and context.run is not None and not in_step_worker():
            claim_run_process(context.instance, context.run, context.log)
        refuse_other_settings(context)

    def connect(self) -> psycopg.Connection:
        """An autocommit connection: every write happens inside an explicit ``conn.transaction()``."""
        options = f"-c {VERIFY_SETTING}=on" if self.verify_targets else ""
        conn = psycopg.connect(
            self.database_url, autocommit=True, application_name="surveillance_pipeline", options=options
        )
        try:
            ensure_state_tables(conn)
        except BaseException:
            conn.close()  # the caller never got it, so nobody else would close it
            raise
        return conn

    def connect_for_findings(self) -> psycopg.Connection:
        """A connection that migrates nothing, for a check to note what it found (target_edits only)."""
        return psycopg.connect(
            self.database_url, autocommit=True, application_name="surveillance_pipeline verify"
        )

    def connect_for_reading(self) -> psycopg.Connection:
        """A connection that cannot write (every transaction read-only) and migrates nothing: a check's."""
        return psycopg.connect(
            self.database_url,
            autocommit=True,
            application_name="surveillance_pipeline verify",
            options="-c default_transaction_read_only=on",
        )


class ThreadConnections:
    """One warehouse connection per thread, opened on the thread's first ``get``, all closed at the end:
    for a step that computes partitions side by side (``report_partitions(side_by_side=...)``), where
    each partition's transaction needs a connection no other thread uses meanwhile.

    ``ahead`` connections are opened at once, in the background, and handed to the first threads that ask:
    each costs about 8 ms of authentication, which the step's threads otherwise paid one after another on
    their first partition, while the step itself spent some 30 ms reading Dagster's versions of its
    upstreams first (a no-change run's step takes ~0.2 s in all)."""

    def __init__(self, warehouse: Warehouse, ahead: int = 0):
        self._warehouse = warehouse
        self._local = threading.local()
        self._opened: list[psycopg.Connection] = []
        self._lock = threading.Lock()
        self._opener = ThreadPoolExecutor(max_workers=ahead, thread_name_prefix="connect") if ahead else None
        self._ahead: list[Future[psycopg.Connection]] = (
            [self._opener.submit(warehouse.connect) for _ in range(ahead)] if self._opener else []
        )

    @classmethod
    def for_partitions(
        cls, warehouse: Warehouse, threads: int, this_thread_too: bool = False
    ) -> ThreadConnections:
        """Connections opened ahead for a step whose partitions run on ``threads`` threads (reporting's
        ``partition_threads``): one each, and one more when this thread asks before them; one only when
        the partitions run on this thread (``threads`` 0)."""
        return cls(warehouse, ahead=threads + this_thread_too if threads else 1)

    def get(self) -> psycopg.Connection:
        conn: psycopg.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            with self._lock:
                opening = self._ahead.pop(0) if self._ahead else None
            # A connection opened ahead that failed raises here, as warehouse.connect() would have.
            conn = opening.result() if opening is not None else self._warehouse.connect()
            self._local.conn = conn
            with self._lock:
                self._opened.append(conn)
        return conn

    def __enter__(self) -> ThreadConnections:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        with self._lock:
            opened, self._opened = self._opened, []
            unclaimed, self._ahead = self._ahead, []
        for opening in unclaimed:
            # Never handed out: closed as soon as it is open; one that failed was never anyone's error.
            if opening.exception() is None:
                opened.append(opening.result())
        if self._opener is not None:
            self._opener.shutdown(wait=True)
        for conn in opened:
            conn.close()


class DataPaths(dg.ConfigurableResource):
    """The data folder every file asset writes under, by its root; its layout is core/data_folder.py's."""

    root: str
    # The region layer region_assignment reads when its config names none: definitions binds the lab's
    # districts (lab/data/lab_districts.geojson), so no domain needs to know the lab.
    region_layer: str = ""

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        # The source observations need no warehouse connection: the data folder is what they all set up
        # (gbif_downloads also takes the warehouse, for verify_targets alone; setting it up opens none).
        refuse_other_settings(context)

    def folder(self) -> DataFolder:
        """The folder's layout (core/data_folder.py, where each path below is documented)."""
        return DataFolder(Path(self.root))

    def raw(self, slug: str) -> Path:
        return self.folder().raw(slug)

    def derived(self, slug: str) -> Path:
        return self.folder().derived(slug)

    def deliveries(self, slug: str) -> Path:
        return self.folder().deliveries(slug)

    def batches(self) -> Path:
        return self.folder().batches()

    def downloads(self) -> Path:
        return self.folder().downloads()

    def download_stamps(self) -> Path:
        return self.folder().download_stamps()

    def download_index(self) -> Path:
        return self.folder().download_index()

    def exports(self, name: str) -> Path:
        return self.folder().exports(name)

    def figures(self, asset: str) -> Path:
        return self.folder().figures(asset)

    def memo(self, asset: str, partition_key: str) -> Path:
        return self.folder().memo(asset, partition_key)

    def stamps(self, asset: str, partition_key: str) -> Path:
        return self.folder().stamps(asset, partition_key)

    def partition(self, asset: str, partition_key: str) -> Path:
        return self.folder().partition(asset, partition_key)


class GbifAccount(dg.ConfigurableResource):
    """A GBIF account (GBIF_USER, GBIF_PASSWORD from the environment), needed only to publish."""

    user: str
    password: str

    def credentials(self) -> GbifAccountCredentials:
        return GbifAccountCredentials(self.user, self.password)


class GbifSource(dg.ConfigurableResource):
    """Where ingest gets records: ``lab`` (the built-in lab data), ``api`` (GBIF's occurrence search) or
    ``download`` (the GBIF download zips in data/downloads/, for queries beyond search's 100,000 records).

    With ``download``, a species that no download holds is searched through ``fallback`` (``api`` by
    default, ``lab`` offline): big species come from downloads, small ones from search, and no species is
    ever emptied because its records are not in a download.
    """

    source: str = LAB_SOURCE
    base_url: str = DEFAULT_BASE_URL
    fallback: str = API_SOURCE

    def reads_downloads(self) -> bool:
        return self._checked_source() == DOWNLOAD_SOURCE

    def reads_lab(self) -> bool:
        return self._checked_source() == LAB_SOURCE

    def client(self) -> GbifClient:
        """The occurrence-search client: ``lab`` or ``api``, or the fallback when downloads are read."""
        source = self._checked_source()
        if source == DOWNLOAD_SOURCE:
            source = self.fallback
            if source not in (LAB_SOURCE, API_SOURCE):
                raise ValueError(
                    f"GBIF_FALLBACK_SOURCE={source!r}: expected {LAB_SOURCE!r} or {API_SOURCE!r}"
                )
        if source == LAB_SOURCE:
            return self.lab_client()
        if source == API_SOURCE:
            return ApiGbifClient(self.base_url)
        raise ValueError(f"GBIF_SOURCE={source!r}: no search client")

    def lab_client(self) -> GbifClient:
        """The lab's GBIF: only the lab's resource (lab/resources.py, bound by definitions) has it."""
        raise ValueError(
            f"GBIF_SOURCE={LAB_SOURCE!r} needs the lab's GBIF: bind lab.resources.LabGbifSource as 'gbif'"
        )

    def _checked_source(self) -> str:
        if self.source not in SOURCES:
            raise ValueError(f"GBIF_SOURCE={self.source!r}: expected one of {', '.join(SOURCES)}")
        return self.source

    def api(self) -> ApiGbifClient:
        """GBIF's HTTP API at ``base_url``, whatever the ingest source (publishing always talks to GBIF)."""
        return ApiGbifClient(self.base_url)


class ReleaseMasking(dg.ConfigurableResource):
    """The release masking key: masked_release's draws are keyed by it (core/seeds.py SeedKey), so that a
    published release, manifest included, cannot be undone. A secret, read through an EnvVar; its id (never
    the key) enters the release's job key, so another key makes every release again, elsewhere."""

    key: str

    def seed_key(self) -> SeedKey:
        return SeedKey(self.key, RELEASE_MASKING_KEY_VARIABLE)


class GeocoderSource(dg.ConfigurableResource):
    """Which geocoder geocoded_localities asks: ``lab`` (a fixed gazetteer) or ``http`` (Nominatim-style).

    ``ledger_salt`` keys the call ledger (HMAC of each locality). It is a secret, read through an EnvVar;
    changing it orphans every ledger entry, so every locality would be paid for again.
    """

    kind: str = LAB_GEOCODER
    base_url: str = DEFAULT_GEOCODER_URL
    requests_per_second: float = DEFAULT_REQUESTS_PER_SECOND
    timeout_seconds: float = 30.0
    user_agent: str = USER_AGENT
    ledger_salt: str

    def geocoder(self) -> Geocoder:
        if self.kind == LAB_GEOCODER:
            return self.lab_geocoder()
        if self.kind == HTTP_GEOCODER:
            return HttpGeocoder(
                self.base_url,
                requests_per_second=self.requests_per_second,
                timeout=self.timeout_seconds,
                user_agent=self.user_agent,
            )
        raise ValueError(f"GEOCODER={self.kind!r}: expected {LAB_GEOCODER!r} or {HTTP_GEOCODER!r}")

    def lab_geocoder(self) -> Geocoder:
        """The lab's gazetteer: only the lab's resource (lab/resources.py, bound by definitions) has it."""
        raise ValueError(
            f"GEOCODER={LAB_GEOCODER!r} needs the lab's gazetteer: bind lab.resources.LabGeocoderSource as "
            "'geocoder'"
        )
