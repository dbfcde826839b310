"""Snapshots: a delivered file becomes the one snapshot a target holds (the devil snapshot)."""
