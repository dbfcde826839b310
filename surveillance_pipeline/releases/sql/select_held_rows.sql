-- How many rows a target's partition holds, by its state row (read where the caller holds the row's lock).
SELECT rows FROM target_state WHERE target = %(target)s AND partition_key = %(partition_key)s
