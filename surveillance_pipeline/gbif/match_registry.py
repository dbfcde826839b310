"""Fill in the species registry's missing GBIF taxon keys from GBIF's species match.

    GBIF_BASE_URL=https://api.gbif.org/v1 python -m surveillance_pipeline.gbif.match_registry [--write]

It reads the registry in use (``SURVEILLANCE_SPECIES_FILE``, else the packaged lab registry) and writes only
a file the user owns: never the packaged one. Only exact, accepted, species-rank matches are taken; anything
else is reported and left empty. Without ``--write`` it only reports. A filled-in key changes that species'
request, so its next ingest fetches it again and derive refuses the old raw snapshot until then.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import sys
from dataclasses import dataclass

from surveillance_pipeline.core.settings import GBIF_BASE_URL_VARIABLE, SPECIES_FILE_VARIABLE
from surveillance_pipeline.gbif.api import DEFAULT_BASE_URL, ApiGbifClient
from surveillance_pipeline.gbif.registry import (
    inside_package,
    parse_registry,
    registry_path,
    write_registry,
)


@dataclass(frozen=True)
class MatchVerdict:
    scientific_name: str
    taxon_key: int | None
    note: str
    # An exact match of an accepted species. GBIF always gives such a match its key; the offline lab match
    # knows keys only where the packaged registry does, so an accepted lab match may still have none.
    accepted: bool = False


def judge(name: str, match: dict) -> MatchVerdict:
    """Accept only an exact match of an accepted species; say why anything else is refused."""
    found = (match.get("matchType"), match.get("rank"), match.get("status"))
    if found == ("EXACT", "SPECIES", "ACCEPTED"):
        key = int(match["usageKey"]) if match.get("usageKey") else None
        note = f"matched {match.get('scientificName')}" + ("" if key else " (no backbone key given)")
        return MatchVerdict(name, key, note, accepted=True)
    return MatchVerdict(name, None, f"not taken: matchType={found[0]}, rank={found[1]}, status={found[2]}")


def fill_missing_keys(registry_text: str, client: ApiGbifClient) -> tuple[str, list[MatchVerdict]]:
    """The registry CSV with missing keys filled where GBIF matched exactly, and a verdict per name asked."""
    reader = csv.DictReader(io.StringIO(registry_text, newline=""))
    rows = list(reader)
    fields = list(reader.fieldnames or [])
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--write", action="store_true", help="rewrite the registry file with the keys found")
    arguments = parser.parse_args(argv)
    path = registry_path()
    if arguments.write and inside_package(path):
        # Refused before asking GBIF anything: the answers could not be kept.
        raise SystemExit(
            f"match_registry: {path} is the packaged lab registry, which an upgrade replaces; set "
            f"{SPECIES_FILE_VARIABLE} to a registry file you own (`python -m "
            "surveillance_pipeline.gbif.add_species --init` starts one) and run again"
        )
    try:
        text = path.read_text(encoding="utf-8")
        parse_registry(text, path)
    except (OSError, ValueError) as error:
        raise SystemExit(f"match_registry: {error}") from None
    client = ApiGbifClient(os.environ.get(GBIF_BASE_URL_VARIABLE) or DEFAULT_BASE_URL)
    updated, verdicts = fill_missing_keys(text, client)
    print(f"registry: {path}")
    for verdict in verdicts:
        print(f"{verdict.scientific_name:<32} {verdict.taxon_key or '-':>10}  {verdict.note}")
    if arguments.write and updated == text:
        print("nothing to write: no key was found")
    elif arguments.write:
        try:
            write_registry(path, updated)
        except ValueError as error:
            # Two names GBIF matched to one accepted key: a duplicate taxon_key, named by line.
            print(f"match_registry: not written: {error}", file=sys.stderr)
            raise SystemExit(1) from None
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
