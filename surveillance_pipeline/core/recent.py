"""Values a process computed recently, kept by key up to a total size. Dagster-free.

For pure functions of a file's bytes (parsing a raw snapshot, deriving it), keyed by the bytes' sha256 and
whatever else the value depends on: the same key gives the same value, so a kept value is never stale. It
is not a cache that outlives its inputs: it lives as long as the process (and so its code), and it is
bounded; the least recently used values go first. A step may compute partitions side by side in threads
(report_partitions), so every use holds a lock.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class RecentValues(Generic[K, V]):
    def __init__(self, limit_bytes: int):
        self.limit_bytes = limit_bytes
        self._kept: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._total_bytes = 0
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            kept = self._kept.get(key)
            if kept is None:
                return None
            self._kept.move_to_end(key)
            return kept[0]

    def put(self, key: K, value: V, size_bytes: int) -> None:
        """Keep ``value`` (of about ``size_bytes``); one larger than the whole limit is not kept."""
        with self._lock:
            if key in self._kept:
                self._total_bytes -= self._kept.pop(key)[1]
            if size_bytes > self.limit_bytes:
                return
            self._kept[key] = (value, size_bytes)
            self._total_bytes += size_bytes
            while self._total_bytes > self.limit_bytes:
                _, (_, dropped) = self._kept.popitem(last=False)
                self._total_bytes -= dropped

    def values(self) -> list[V]:
        """Oldest first."""
        with self._lock:
            return [value for value, _ in self._kept.values()]
