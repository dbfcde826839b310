-- The input checksum a target's partition was loaded from (its key's input), by its state row.
SELECT parts ->> 'input' FROM target_state WHERE target = %(target)s AND partition_key = %(partition_key)s
