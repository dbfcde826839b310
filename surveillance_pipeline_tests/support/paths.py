"""Where things are, computed once from this file, so a test moved between folders needs no path fix."""

from pathlib import Path

TESTS_ROOT = Path(__file__).resolve().parent.parent
PROJECT_ROOT = TESTS_ROOT.parent
# The public GBIF and Natural Earth files the tests read, with their provenance and SHA256SUMS (conftest).
CARRIED_DATA = TESTS_ROOT / "data" / "shared"
