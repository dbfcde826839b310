-- A species' rows as a full reload would write them, kept beside its partition while a delta is found:
-- the parent's columns, in its order (so a row's text, and its hash in the fingerprint, is the same here).
CREATE TEMPORARY TABLE next_occurrences (LIKE {occurrences}) ON COMMIT DROP
