"""``make plan``: what the next ``make run`` would load, and why, without writing anything
(planning/plan.py)."""

from __future__ import annotations

import argparse
import os
import sys

import psycopg

from surveillance_pipeline.commands import exit_process
from surveillance_pipeline.core.migrations import MIGRATIONS, applied_version
from surveillance_pipeline.core.seeds import SeedKey
from surveillance_pipeline.core.settings import (
    DATABASE_URL_VARIABLE,
    GEOCODER_LEDGER_SALT_VARIABLE,
    RELEASE_MASKING_KEY_VARIABLE,
)
from surveillance_pipeline.definitions import live_resources
from surveillance_pipeline.planning.plan import make_plan


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="What the next make run would load, and why (reads only).")
    parser.add_argument("--list", type=int, default=20, help="partitions listed per kind (default 20)")
    arguments = parser.parse_args(argv)
    url = os.environ.get(DATABASE_URL_VARIABLE)
    if not url:
        print(f"plan: {DATABASE_URL_VARIABLE} is not set (make plan sets it)", file=sys.stderr)
        return 2
    resources = live_resources()
    # The salt is an EnvVar in the definitions (a secret, resolved at run time): resolved here the same.
    geocoder = resources["geocoder"].model_copy(
        update={"ledger_salt": os.environ.get(GEOCODER_LEDGER_SALT_VARIABLE, "")}
    )
    # The masking key likewise; its id (never the key) is what a release's job key names.
    masking_key = os.environ.get(RELEASE_MASKING_KEY_VARIABLE, "")
    masking_key_id = SeedKey(masking_key).id if masking_key else None
    with psycopg.connect(url, autocommit=True, application_name="surveillance_pipeline plan") as conn:
        if applied_version(conn) < MIGRATIONS[-1].version:
            print(
                "plan: this warehouse predates fingerprints; the next run upgrades it and loads",
                file=sys.stderr,
            )
            return 2
        reads_downloads = resources["gbif"].reads_downloads()
        plan = make_plan(
            conn,
            resources["paths"],
            geocoder,
            reads_downloads=reads_downloads,
            masking_key_id=masking_key_id,
        )
    source = "gbif_raw reads data/downloads/" if reads_downloads else "gbif_raw asks GBIF at run time"
    print(f"plan: what the next `make run` would do (reads only; {source})")
    if plan.indexed_here:
        print(
            f"plan: indexed {', '.join(plan.indexed_here)} in a temporary folder (the run indexes it again)"
        )
    for line in plan.lines(arguments.list):
        print("  " + line if line else "")
    return 0


if __name__ == "__main__":
    exit_process(main())
