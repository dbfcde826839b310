"""GBIF: the species registry, the API and download readers, the record rules and raw snapshots.

Depends on core only; the lab's stand-in client lives in lab/."""
