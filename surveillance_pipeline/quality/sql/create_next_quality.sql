-- A species' quality rows as a full reload would write them, kept beside its held rows while a delta is
-- found: the table's columns, in its order (so a row's text, and its hash in the fingerprint, is the same).
CREATE TEMPORARY TABLE next_occurrence_quality (LIKE {table}) ON COMMIT DROP
