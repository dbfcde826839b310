"""Derived seeds: randomness that a re-run of the same logical run draws again, bit for bit.

A seed is the first 8 bytes of HMAC-SHA256 over ``{logical run id}|{stage name}`` under a secret key
(SeedKey). The logical run id names what a stage computes from (the partition key and the job key of its
inputs), never Dagster's random run id or the clock, so a re-run over the same inputs draws the same
numbers and a new input draws new ones. Each stage derives its own seed from its own name: no generator is
shared between stages, so adding a draw in one stage cannot shift another's. The key, because the one
stage that draws (the masked release) moves each point by a secret amount: from what it publishes alone
(its logical run id, its rows in id order), anyone could draw the same numbers again and undo them.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from surveillance_pipeline.core.lazy_modules import LazyModule

if TYPE_CHECKING:
    import numpy as np
else:
    np = LazyModule("numpy")


def logical_run_id(partition_key: str, input_job_key: str) -> str:
    """What a stage's output is a function of: the partition and the job key of what it reads."""
    return f"{partition_key}/{input_job_key}"


# What a key's id is the HMAC of: the id names the key (which key made an output) and reveals nothing of it.
KEY_ID_MESSAGE = b"surveillance_pipeline key id"
KEY_ID_CHARACTERS = 16


@dataclass(frozen=True)
class SeedKey:
    """A secret key (from the environment) for seeds that must not be derivable from what is published."""

    secret: str = field(repr=False)
    # The environment variable it comes from, for the message when it is empty.
    variable: str = "the key"

    def __post_init__(self) -> None:
        if not self.secret:
            raise ValueError(f"{self.variable} is empty: set it (make run writes one into .local/env.sh)")

    @property
    def id(self) -> str:
        """The first 16 hex characters of HMAC-SHA256(key, KEY_ID_MESSAGE): safe to publish."""
        digest = hmac.new(self.secret.encode(), KEY_ID_MESSAGE, hashlib.sha256).hexdigest()
        return digest[:KEY_ID_CHARACTERS]

    def seed(self, logical_run: str, stage: str) -> int:
        """An unsigned 64-bit seed: the first 8 bytes (big-endian) of HMAC-SHA256(key, ``run|stage``)."""
        digest = hmac.new(self.secret.encode(), f"{logical_run}|{stage}".encode(), hashlib.sha256).digest()
        return int.from_bytes(digest[:8], "big")


def stage_generator(seed: int) -> np.random.Generator:
    """numpy's PCG64 generator on a derived seed (its stream is stable across numpy versions)."""
    return np.random.Generator(np.random.PCG64(seed))
