"""Fill in the species registry's missing GBIF taxon keys from GBIF's species match.

    GBIF_BASE_URL=https://api.gbif.org/v1 python -m surveillance_pipeline.gbif.match_registry [--write]

Only exact, accepted, species-rank matches are taken; anything else is reported and left empty. Without
``--write`` it only reports. A filled-in key changes that species' request, so its next ingest fetches
it again and derive refuses the old raw snapshot until then.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from surveillance_pipeline.gbif.api import DEFAULT_BASE_URL, ApiGbifClient
from surveillance_pipeline.gbif.registry import REGISTRY_FILE


@dataclass(frozen=True)
class MatchVerdict:
    scientific_name: str
    taxon_key: int | None
    note: str


def judge(name: str, match: dict) -> MatchVerdict:
    """Accept only an exact match of an accepted species; say why anything else is refused."""
    found = (match.get("matchType"), match.get("rank"), match.get("status"))
    if found == ("EXACT", "SPECIES", "ACCEPTED") and match.get("usageKey"):
        return MatchVerdict(name, int(match["usageKey"]), f"matched {match.get('scientificName')}")
    return MatchVerdict(name, None, f"not taken: matchType={found[0]}, rank={found[1]}, status={found[2]}")


def fill_missing_keys(registry_text: str, client: ApiGbifClient) -> tuple[str, list[MatchVerdict]]:
    """The registry CSV with missing keys filled where GBIF matched exactly, and a verdict per name asked."""
    rows = list(csv.DictReader(io.StringIO(registry_text)))
    fields = list(rows[0].keys()) if rows else []
    verdicts = []
    for row in rows:
        if row["taxon_key"]:
            continue
        verdict = judge(row["scientific_name"], client.species_match(row["scientific_name"]))
        verdicts.append(verdict)
        if verdict.taxon_key is not None:
            row["taxon_key"] = str(verdict.taxon_key)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue(), verdicts


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--write", action="store_true", help="rewrite the registry file with the keys found")
    arguments = parser.parse_args()
    path = Path(str(resources.files(__package__).joinpath(REGISTRY_FILE)))
    client = ApiGbifClient(os.environ.get("GBIF_BASE_URL", DEFAULT_BASE_URL))
    updated, verdicts = fill_missing_keys(path.read_text(encoding="utf-8"), client)
    for verdict in verdicts:
        print(f"{verdict.scientific_name:<32} {verdict.taxon_key or '-':>10}  {verdict.note}")
    if arguments.write:
        path.write_text(updated, encoding="utf-8")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
