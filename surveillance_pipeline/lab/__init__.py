"""The built-in lab sources: deterministic GBIF records, a gazetteer, districts, daily batches and
deliveries, so a fresh machine runs the whole pipeline with no network; and `make run` (run.py)."""
