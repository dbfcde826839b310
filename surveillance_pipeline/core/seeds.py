"""Derived seeds: randomness that a re-run of the same logical run draws again, bit for bit.

A seed is the first 8 bytes of sha256 over ``{logical run id}|{stage name}``. The logical run id names
what a stage computes from (the partition key and the job key of its inputs), never Dagster's random run
id or the clock, so a re-run over the same inputs draws the same numbers and a new input draws new ones.
Each stage derives its own seed from its own name: no generator is shared between stages, so adding a
draw in one stage cannot shift another's.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from surveillance_pipeline.core.lazy_modules import LazyModule

if TYPE_CHECKING:
    import numpy as np
else:
    np = LazyModule("numpy")


def logical_run_id(partition_key: str, input_job_key: str) -> str:
    """What a stage's output is a function of: the partition and the job key of what it reads."""
    return f"{partition_key}/{input_job_key}"


def derived_seed(logical_run: str, stage: str) -> int:
    """An unsigned 64-bit seed: the first 8 bytes (big-endian) of sha256(``logical_run|stage``)."""
    digest = hashlib.sha256(f"{logical_run}|{stage}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def stage_generator(seed: int) -> np.random.Generator:
    """numpy's PCG64 generator on a derived seed (its stream is stable across numpy versions)."""
    return np.random.Generator(np.random.PCG64(seed))
