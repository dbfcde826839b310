"""The data-shaping settings a command was given are kept for the next commands of the clone
(scripts/kept_settings.sh, sourced by the Makefile): a fresh shell never reads another data folder
without saying so."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "kept_settings.sh"
NAMES = ("SURVEILLANCE_DATA_DIR", "GBIF_SOURCE", "SURVEILLANCE_SPECIES_FILE", "SURVEILLANCE_QUALITY_FILE")


def command(clone: Path, **given: str) -> tuple[dict[str, str], str]:
    """Source the script in ``clone`` from a shell that has only ``given`` of the kept settings; the
    settings the command then sees, and what it said."""
    environment = {k: v for k, v in os.environ.items() if k not in NAMES} | given
    printed = " ".join(f'"${{{name}:-}}"' for name in NAMES)
    done = subprocess.run(  # noqa: S603  # fixed argv, no user input
        ["bash", "-c", f'set -e; . "{SCRIPT}"; printf "%s\\n" {printed}'],
        cwd=clone,
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(zip(NAMES, done.stdout.split("\n"), strict=False)), done.stderr


def test_a_data_folder_given_once_is_used_by_the_next_command_from_a_fresh_shell(tmp_path):
    disk = tmp_path / "disk"
    seen, said = command(tmp_path, SURVEILLANCE_DATA_DIR=str(disk), GBIF_SOURCE="download")
    assert seen["SURVEILLANCE_DATA_DIR"] == str(disk) and seen["GBIF_SOURCE"] == "download"
    assert said == ""

    seen, said = command(tmp_path)  # a fresh shell: nothing set
    assert seen["SURVEILLANCE_DATA_DIR"] == str(disk) and seen["GBIF_SOURCE"] == "download"
    assert seen["SURVEILLANCE_SPECIES_FILE"] == "", "what was never given stays unset (its default)"
    assert f"SURVEILLANCE_DATA_DIR={disk}, as an earlier command was given" in said


def test_a_new_value_replaces_the_kept_one_and_says_so_and_a_relative_path_is_kept_absolute(tmp_path):
    command(tmp_path, SURVEILLANCE_DATA_DIR="/first/disk")
    seen, said = command(tmp_path, SURVEILLANCE_DATA_DIR="data")
    assert seen["SURVEILLANCE_DATA_DIR"] == str(tmp_path / "data")
    assert f"SURVEILLANCE_DATA_DIR={tmp_path / 'data'}, in place of /first/disk" in said
    assert command(tmp_path)[0]["SURVEILLANCE_DATA_DIR"] == str(tmp_path / "data")
    kept = (tmp_path / ".local" / "settings.env").read_text(encoding="utf-8")
    assert kept == f"SURVEILLANCE_DATA_DIR={tmp_path / 'data'}\n"


def test_a_kept_value_is_read_as_text_never_run(tmp_path):
    (tmp_path / ".local").mkdir()
    (tmp_path / ".local" / "settings.env").write_text("GBIF_SOURCE=$(touch pwned)\n", encoding="utf-8")
    seen, _ = command(tmp_path)
    assert seen["GBIF_SOURCE"] == "$(touch pwned)" and not (tmp_path / "pwned").exists()
