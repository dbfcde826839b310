"""The Dagster plumbing: resources, reporting, jobs, automation, partitions, pools, run health, the
distributed profile and its Celery app, and the one fence around Dagster's private API. Imports only
core, gbif and geocoding: the domains build on it, and definitions.py assembles it with them."""
