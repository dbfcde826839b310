"""The Dagster-free core: job keys, canonical JSON, the refresh transaction, SQL loading.

Nothing here imports Dagster, so unit tests reach it directly and the same rules serve sensors,
commands and assets alike.
"""
