"""Places: geocoded localities (through a call ledger) and region assignment (point in polygon, nearest)."""
