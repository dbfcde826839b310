"""The run loop's watch on its Redis: a restart without the data stops the run, saying so; a restart that
loaded its data, or a Redis that does not answer, is not one (Celery's own errors cover the latter)."""

import pytest

from surveillance_pipeline.orchestration import distributed
from surveillance_pipeline.orchestration.distributed import BrokerRestarted, BrokerRestartWatch
from surveillance_pipeline_tests.support.redis_server import PrivateRedis


class _Result:
    """What a step's Celery result answers to the run loop."""

    def ready(self) -> bool:
        return False

    def get(self) -> list[str]:
        return ["event"]


def test_a_redis_restarted_empty_stops_the_run_and_one_restarted_with_its_data_does_not(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(distributed, "RESTART_CHECK_SECONDS", 0.0)
    with PrivateRedis(tmp_path / "redis") as redis_server:
        monkeypatch.setenv("REDIS_URL", redis_server.url)
        watch = BrokerRestartWatch(redis_server.url)
        watched = watch.result(_Result())
        assert watched.ready() is False and watched.get() == ["event"]
        # Saved, then restarted: it loads its dump (as a clean `systemctl restart redis-server` does).
        import redis

        client = redis.Redis.from_url(redis_server.url)
        client.set("queued-step", "1")
        client.save()
        client.close()
        redis_server.stop()
        # Stopped: not this watch's to say (Celery's reconnection errors name it, broker_failure).
        assert watched.ready() is False
        redis_server.start()
        assert watched.ready() is False
        # Restarted without its data: the steps queued in it are gone.
        (tmp_path / "redis" / "dump.rdb").unlink()
        redis_server.stop()
        redis_server.start()
        with pytest.raises(BrokerRestarted) as restarted:
            watched.ready()
    said = str(restarted.value)
    assert said.startswith(
        f"the steps' broker, Redis at 127.0.0.1:{redis_server.port} (REDIS_URL), restarted without its data"
    )
    assert "launch the failed partitions again" in said
