"""GBIF: the species registry, the client interface with its lab implementation, raw snapshots."""
