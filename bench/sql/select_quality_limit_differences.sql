-- Records whose flags (all but the outliers', which the limit does not compute) differ between the
-- project's rows and the limit's ({table}): 0 when the two did the same work.
SELECT count(*)
FROM occurrence_quality AS p
JOIN {table} AS l USING (species_id, id)
WHERE (p.flag_gbif_issues, p.flag_basis, p.flag_uncertainty, p.flag_precision, p.flag_old, p.flag_zero,
       p.flag_equal, p.flag_capitals, p.flag_centroids, p.flag_gbif_hq, p.flag_sea, p.flag_country,
       p.flag_duplicates)
      IS DISTINCT FROM
      (l.flag_gbif_issues, l.flag_basis, l.flag_uncertainty, l.flag_precision, l.flag_old, l.flag_zero,
       l.flag_equal, l.flag_capitals, l.flag_centroids, l.flag_gbif_hq, l.flag_sea, l.flag_country,
       l.flag_duplicates)
