-- A delta found too large, or not to be made from the kept lines: the tables its rows were made from go
-- before the full reload makes them again.
DROP TABLE IF EXISTS incoming_quality_terms, incoming_gone_records, incoming_outliers, quality_points,
    quality_candidates, next_occurrence_quality
