-- The fingerprint of a partition loaded before fingerprints were taken, recorded once its count agreed.
UPDATE target_state
SET digest = %(digest)s, partition_ref = %(partition_ref)s
WHERE target = %(target)s AND partition_key = %(partition_key)s
