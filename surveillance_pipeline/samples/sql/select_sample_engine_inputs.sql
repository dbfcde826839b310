-- What the engines' summaries depend on in the warehouse: every sampled partition's job key (the rows it
-- was drawn from, its cap) and any edit the watch noted on the sample since (a noted edit: no reuse).
SELECT coalesce(
           (SELECT jsonb_agg(jsonb_build_array(partition_key, job_key) ORDER BY partition_key)
            FROM target_state WHERE target = %(target)s),
           '[]'::jsonb),
       (SELECT count(*) FROM target_edits WHERE target = %(target)s)
