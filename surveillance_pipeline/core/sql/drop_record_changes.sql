-- A delta found too large: its tables go, so the full reload that follows starts as it would alone.
DROP TABLE IF EXISTS record_changes, {next}
