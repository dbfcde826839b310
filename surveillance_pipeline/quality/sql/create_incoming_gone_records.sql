-- The gbifIDs of the records whose line the lines kept by the last load hold and this load's input lacks
-- (core/line_digests.py): a delta removes their rows. Empty unless the load copies only the changed lines.
CREATE TEMPORARY TABLE incoming_gone_records (id bigint PRIMARY KEY) ON COMMIT DROP
