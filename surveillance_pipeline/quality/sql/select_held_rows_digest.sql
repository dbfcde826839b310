-- What a partition's rows were when its load committed: their count and digest (core/fingerprints.py).
SELECT rows, digest
FROM target_state
WHERE target = %(target)s AND partition_key = %(partition_key)s
