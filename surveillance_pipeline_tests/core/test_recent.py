"""RecentValues: what a process keeps of its recent parses and derives, bounded by size."""

from surveillance_pipeline.core.recent import RecentValues


def test_the_least_recently_used_values_go_first_past_the_limit():
    kept: RecentValues[str, str] = RecentValues(limit_bytes=10)
    kept.put("a", "A", 4)
    kept.put("b", "B", 4)
    assert kept.get("a") == "A"  # now the most recently used
    kept.put("c", "C", 4)
    assert kept.get("b") is None
    assert kept.values() == ["A", "C"]


def test_a_value_larger_than_the_limit_is_not_kept_and_replacing_a_key_frees_its_size():
    kept: RecentValues[str, str] = RecentValues(limit_bytes=10)
    kept.put("a", "A", 6)
    kept.put("huge", "H", 11)
    assert kept.get("huge") is None and kept.values() == ["A"]
    kept.put("a", "A2", 2)
    kept.put("b", "B", 8)
    assert kept.values() == ["A2", "B"]
