"""make run's line, and a run's failure, for a step that a worker refused, a broker that stopped or a
warehouse server that went away: the refusal's own words, or the broker's or the server's place, not the
executor's wrapper."""

import pytest

from surveillance_pipeline.orchestration.dagster_internals import SerializableErrorInfo
from surveillance_pipeline.orchestration.error_words import one_line

REFUSAL = (
    "this worker's settings differ from run 5c1f's, so the step would write something else; start the worker "
    "with the run's settings (docs/scaling.md):\n"
    "  SURVEILLANCE_SPECIES_FILE: the run has 'sha256:86e9… (6 species)', "
    "this worker 'sha256:92b2… (71 species)'"
)
# As dagster-celery's core_execution_loop renders a task that raised: "[step]: " and the worker's error
# with its stack and causes (SerializableErrorInfo.to_string()).
WORKER_ERROR = SerializableErrorInfo(
    message="dagster._core.errors.DagsterResourceFunctionError: Error executing resource_fn on "
    "ResourceDefinition paths\n",
    stack=['  File "resources_init.py", line 319, in single_resource_event_generator\n'],
    cls_name="DagsterResourceFunctionError",
    cause=SerializableErrorInfo(
        message=f"dagster._core.definitions.events.Failure: {REFUSAL}\n",
        stack=['  File "resources.py", line 50, in refuse_other_settings\n'],
        cls_name="Failure",
    ),
)


def test_a_run_that_fails_for_a_worker_refusal_says_the_refusal_the_worker_stored():
    """The refusal as the worker stored it in the run's event log (a resource init failure whose cause is the
    Failure), not what came back through Celery ("DagsterError: Error executing resource_fn on
    ResourceDefinition paths", seen 2026-12-06)."""
    from surveillance_pipeline.orchestration.distributed import worker_failure_words

    flat = " ".join(line.strip() for line in REFUSAL.splitlines())
    assert worker_failure_words([("gbif_raw", WORKER_ERROR), (None, None)]) == (
        f"step gbif_raw failed on a worker: {flat}"
    )
    # The same refusal stored for two steps is said once per step; nothing stored, nothing said.
    assert worker_failure_words([("gbif_raw", WORKER_ERROR), ("gbif_raw", WORKER_ERROR)]) == (
        f"step gbif_raw failed on a worker: {flat}"
    )
    assert worker_failure_words([("gbif_raw", None)]) is None


def test_any_other_error_is_left_to_the_usual_line():
    other = SerializableErrorInfo(message="builtins.KeyError: 'x'\n", stack=[], cls_name="KeyError")
    assert one_line(other) == "KeyError: 'x'"


def test_a_full_disk_is_said_once_per_disk_and_other_failures_stay(tmp_path):
    from surveillance_pipeline.commands.disk_full import collapse_disk_full

    (tmp_path / "downloads").mkdir()
    (tmp_path / "downloads" / "0001.zip").write_bytes(b"z" * (3 * 1024 * 1024 * 30))  # 90 MB
    failures = [
        *(f"gbif_raw partition s{n} failed: [Errno 28] No space left on device" for n in range(49)),
        'occurrences partition s1 failed: DiskFull: could not extend file "base/16384/2619": No space left '
        "on device HINT: Check free disk space.",
        "occurrences partition s2 failed: data/derived/s2.csv: line 3, field year: not a year: 'x'",
    ]
    said = collapse_disk_full(failures, tmp_path)
    assert len(said) == 3 and said[2] == failures[-1]
    assert said[0].startswith(
        f"the disk of the data folder {tmp_path} is full ([Errno 28] No space left on device;"
    )
    assert "49 failed: gbif_raw (49)" in said[0] and "a run needs about 70 MB" in said[0]
    assert said[1].startswith("PostgreSQL's disk is full (could not extend file; 1 failed: occurrences (1))")
    assert collapse_disk_full(failures[-1:], tmp_path) == failures[-1:]


def test_a_broker_that_stopped_answering_is_named_with_its_place_and_what_to_do(monkeypatch):
    import redis

    from surveillance_pipeline.orchestration.distributed import broker_failure, broker_lost_message

    monkeypatch.setenv("REDIS_URL", "redis://:secret-password@broker.example:6390/0")
    try:
        try:
            raise redis.exceptions.ConnectionError(
                "Error 111 connecting to broker.example:6390. Connection refused."
            )
        except redis.exceptions.ConnectionError as lost:
            raise RuntimeError("Retry limit exceeded") from lost
    except RuntimeError as wrapped:
        cause = broker_failure(wrapped)
    assert isinstance(cause, redis.exceptions.ConnectionError)
    said = broker_lost_message(cause)
    assert said.startswith("the steps' broker, Redis at broker.example:6390 (REDIS_URL), stopped answering")
    assert "Connection refused" in said and "secret-password" not in said
    assert broker_failure(KeyError("x")) is None
    assert broker_failure(
        RuntimeError("Retry limit exceeded while trying to reconnect to the Celery result store")
    )


def test_a_warehouse_server_that_went_away_is_named_and_a_refused_statement_is_not(monkeypatch, database_url):
    """A session the server ended (its backend terminated, as a shutdown does) is the server gone; a
    statement it refused, or a full disk, is not: the server is there and said why."""
    import psycopg

    from surveillance_pipeline.orchestration.error_words import warehouse_lost, warehouse_lost_message

    monkeypatch.setenv(
        "SURVEILLANCE_DATABASE_URL", "postgresql://surveillance:secret-password@db.example:6543/w"
    )
    with psycopg.connect(database_url, autocommit=True) as victim, psycopg.connect(database_url) as admin:
        pid = victim.info.backend_pid
        admin.execute("SELECT pg_terminate_backend(%s)", [pid])
        with pytest.raises(psycopg.OperationalError) as ended:
            victim.execute("SELECT 1")
        with pytest.raises(psycopg.errors.UndefinedTable) as refused:
            admin.execute("SELECT * FROM no_such_table")
    try:
        raise RuntimeError("a step failed") from ended.value
    except RuntimeError as wrapped:
        cause = warehouse_lost(wrapped)
    assert cause is ended.value
    said = warehouse_lost_message(cause)
    assert said.startswith(
        "the warehouse's server, PostgreSQL at db.example:6543 (SURVEILLANCE_DATABASE_URL), stopped answering"
    )
    assert "terminating connection" in said and "secret-password" not in said
    assert "launch the failed partitions again" in said
    assert warehouse_lost(refused.value) is None
    assert warehouse_lost(psycopg.errors.DiskFull("could not extend file")) is None
    assert warehouse_lost(KeyError("x")) is None
