"""Releases: exports that are the same bytes on every re-run, each with a sha256 manifest."""
