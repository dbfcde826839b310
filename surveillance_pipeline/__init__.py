"""GBIF occurrence records into PostGIS, re-runnable without doubling a row or changing an output."""
