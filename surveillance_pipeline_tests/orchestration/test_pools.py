"""Pool limits are set before any run claims a pool (a fresh pool's first claims race)."""

import pytest

from surveillance_pipeline.definitions import defs
from surveillance_pipeline.orchestration.pools import POOL_LIMIT, asset_pools, ensure_pool_limits

pytestmark = [pytest.mark.db, pytest.mark.dagster]


def test_every_asset_pool_gets_a_limit_of_one_and_a_users_own_limit_stays(postgres_instance):
    pools = asset_pools(defs)
    assert {"gbif_raw", "occurrences", "occurrence_feed", "devil_snapshot", "sample_export"} <= set(pools)
    assert pools["derived_dataset_registration"] == POOL_LIMIT, "the publishing job's op pool too"
    storage = postgres_instance.event_log_storage
    storage.set_concurrency_slots("occurrences", 2)  # what a user may set in the UI

    assert ensure_pool_limits(postgres_instance, defs) == {p: POOL_LIMIT for p in pools if p != "occurrences"}
    limits = {pool: storage.get_concurrency_info(pool).slot_count for pool in pools}
    assert limits == {pool: 2 if pool == "occurrences" else POOL_LIMIT for pool in pools}
    assert ensure_pool_limits(postgres_instance, defs) == {}


def test_under_the_distributed_profile_a_species_pool_admits_one_step_per_worker(monkeypatch):
    monkeypatch.setenv("SURVEILLANCE_PROFILE", "distributed")
    monkeypatch.setenv("SURVEILLANCE_PARTITION_WRITERS", "3")
    limits = asset_pools(defs)
    # Species-partitioned: different runs hold different species, and each partition has its own lock.
    assert limits["occurrences"] == limits["gbif_raw"] == 3
    # Whole targets keep one writer.
    assert limits["devil_snapshot"] == limits["sample_export"] == limits["occurrence_feed"] == POOL_LIMIT
