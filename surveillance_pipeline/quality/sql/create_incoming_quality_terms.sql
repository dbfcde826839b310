-- A species' records as text, in the columns of a records file ({columns}: every one, text), COPY'd in
-- before its quality rows are made.
CREATE TEMPORARY TABLE incoming_quality_terms ({columns}) ON COMMIT DROP
