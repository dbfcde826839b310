"""What the tests stand on: scratch databases, fakes of GBIF and a geocoder, the asset-running helpers, a real
`dagster dev` and a headless browser, a private Redis and Celery workers. No tests here."""
