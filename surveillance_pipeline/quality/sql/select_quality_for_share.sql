-- A quality partition's key parts and fingerprint, share-locked against a reload while a release reads
-- its flags, and the edits noted against it since its load (NULL: none).
SELECT state.parts,
       state.rows,
       state.digest,
       (SELECT array_to_string(edits.operations, ', ') FROM target_edits AS edits
        WHERE edits.target = state.target AND edits.partition_ref = state.partition_ref)
FROM target_state AS state
WHERE state.target = %(target)s AND state.partition_key = %(partition_key)s
FOR SHARE OF state
