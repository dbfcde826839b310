-- A species' assignments of the records a delta reassigns, as a full reload writes them: the table's
-- columns in its order (a row's text, and its hash in the fingerprint, is the same).
CREATE TEMPORARY TABLE next_region_assignment (LIKE {table}) ON COMMIT DROP
