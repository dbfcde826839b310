"""A path timed several times on a shared, noisy machine: the median is what the tables quote."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Measure:
    """Seconds of each repetition of one path; the median is what the tables quote."""

    seconds: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    def as_dict(self) -> dict[str, Any]:
        return {"median": round(self.median, 4), "runs": [round(s, 4) for s in self.seconds]}


def repeat(reps: int, action: Callable[[], Any], setup: Callable[[], Any] | None = None) -> Measure:
    """Time ``action`` ``reps`` times, running the untimed ``setup`` before each."""
    measure = Measure()
    for _ in range(reps):
        if setup is not None:
            setup()
        started = time.perf_counter()
        action()
        measure.seconds.append(time.perf_counter() - started)
    return measure


def median_of(value: Measure | dict[str, Any]) -> float:
    """The median of a Measure, or of one as a section file holds it (rounded to 0.1 ms)."""
    return value.median if isinstance(value, Measure) else float(value["median"])


def runs_of(value: Measure | dict[str, Any]) -> list[float]:
    return value.seconds if isinstance(value, Measure) else list(value["runs"])


def ratio(numerator: float, denominator: float) -> float:
    return round(numerator / denominator, 3) if denominator else float("nan")


def to_json(value: Any) -> Any:
    """``value`` with every Measure as its median and runs: what a section file holds."""
    if isinstance(value, Measure):
        return value.as_dict()
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [to_json(v) for v in value]
    return value
