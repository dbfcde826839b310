"""The batch ledger: a batch applied twice changes the target once (right for batches that add up)."""
