"""Replay a masked release from its provenance row, byte for byte, and prove it by the manifest sha256.

    python -m surveillance_pipeline.releases.replay --provenance-id N [--into FOLDER]

The row names the partition, the job key parts (upstream key, config with the masking key's id) and the
logical run; the release is rebuilt from them and the release masking key (RELEASE_MASKING_KEY: only its
holder can replay, as only its holder can draw each record's move) into a scratch folder, and its
manifest's sha256 (which names every file's sha256) must equal the recorded one. Exit status 0 when
equal, 1 when not, 2 when the row cannot be replayed. The upstream occurrences partition must still hold
the recorded input: the release is a function of those rows.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import psycopg

from surveillance_pipeline.core.keys import JobKeyParts
from surveillance_pipeline.core.refresh import ensure_state_tables
from surveillance_pipeline.core.seeds import SeedKey, logical_run_id
from surveillance_pipeline.core.settings import DATABASE_URL_VARIABLE, RELEASE_MASKING_KEY_VARIABLE
from surveillance_pipeline.core.sql_files import load_sql
from surveillance_pipeline.releases.masking import (
    MASKING_VERSION,
    STAGE,
    build_masked_release,
    rules_of_config,
)

PACKAGE = "surveillance_pipeline.releases"


class NotReplayable(ValueError):
    """The provenance row is not a masked release this code can regenerate."""


@dataclass(frozen=True)
class ReplayResult:
    provenance_id: int
    partition_key: str
    masking_key_id: str
    recorded_manifest_sha256: str
    replayed_manifest_sha256: str
    folder: Path

    @property
    def equal(self) -> bool:
        return self.recorded_manifest_sha256 == self.replayed_manifest_sha256


def replay_masked_release(
    conn: psycopg.Connection, provenance_id: int, into: Path, key: SeedKey
) -> ReplayResult:
    """Regenerate the release a provenance row records into ``into`` (a folder replaced whole), with ``key``:
    the release masking key the row's key id names."""
    row = conn.execute(load_sql(PACKAGE, "select_provenance_for_replay"), {"id": provenance_id}).fetchone()
    if row is None:
        raise NotReplayable(f"no provenance row {provenance_id}")
    asset, partition_key, job_key, parts, detail = row
    if asset != STAGE or not detail or "logical_run_id" not in detail:
        raise NotReplayable(
            f"provenance row {provenance_id} is {asset!r}, not a {STAGE} with its logical run"
        )
    if parts["transform"] != MASKING_VERSION:
        raise NotReplayable(
            f"row {provenance_id} was made by masking version {parts['transform']}; this code is "
            f"version {MASKING_VERSION}"
        )
    recorded = JobKeyParts(parts["input"], parts["transform"], parts["config"], parts["schema"])
    if recorded.key != job_key:
        raise NotReplayable(f"row {provenance_id}: its parts do not hash to its job key")
    if detail["logical_run_id"] != logical_run_id(partition_key, parts["input"]):
        raise NotReplayable(f"row {provenance_id}: its logical run is not its partition's and input's")
    rules, key_id = rules_of_config(parts["config"])
    if key_id != key.id:
        raise NotReplayable(
            f"row {provenance_id} was masked under the key with id {key_id}; {RELEASE_MASKING_KEY_VARIABLE} "
            f"is the key with id {key.id}"
        )
    release = build_masked_release(
        conn, partition_key, rules, into, key=key, expected_input=parts["input"], rebuild=True
    )
    return ReplayResult(
        provenance_id, partition_key, key.id, detail["manifest_sha256"], release.manifest_sha256, into
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--provenance-id", type=int, required=True)
    parser.add_argument("--into", type=Path, help="scratch folder (default: a new temporary folder)")
    args = parser.parse_args(argv)
    into = args.into or Path(tempfile.mkdtemp(prefix="masked_release_replay_")) / "release"
    with psycopg.connect(os.environ[DATABASE_URL_VARIABLE], autocommit=True) as conn:
        ensure_state_tables(conn)
        try:
            key = SeedKey(os.environ.get(RELEASE_MASKING_KEY_VARIABLE, ""), RELEASE_MASKING_KEY_VARIABLE)
            result = replay_masked_release(conn, args.provenance_id, into, key)
        except (NotReplayable, ValueError) as error:
            print(f"cannot replay: {error}", file=sys.stderr)
            return 2
    verdict = "equal" if result.equal else "DIFFERENT"
    print(
        f"provenance {result.provenance_id} ({STAGE} {result.partition_key}, "
        f"key id {result.masking_key_id}): "
        f"manifest sha256 {verdict}\n  recorded {result.recorded_manifest_sha256}\n"
        f"  replayed {result.replayed_manifest_sha256}\n  files in {result.folder}"
    )
    return 0 if result.equal else 1


if __name__ == "__main__":
    raise SystemExit(main())
