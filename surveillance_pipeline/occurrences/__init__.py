"""Occurrences: raw GBIF snapshots, derived CSV files and the PostGIS ``occurrences`` table."""
