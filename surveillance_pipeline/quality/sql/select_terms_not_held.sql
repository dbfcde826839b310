-- Whether a record occurrences keeps has neither a changed line nor a held row
-- (create_quality_candidates_of_lines.sql): its terms are nowhere a delta reads them from.
SELECT 1 FROM quality_candidates WHERE terms_not_held LIMIT 1
