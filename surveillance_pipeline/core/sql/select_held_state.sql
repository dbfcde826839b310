-- What a partition's state row says it holds: its rows, and the input checksum its key names.
SELECT rows, parts ->> 'input' FROM target_state WHERE target = %(target)s AND partition_key = %(partition_key)s
