"""Samples: the first ``cap`` records per species by md5 of the id text, then id."""
