"""``make bench``: the project's code paths timed side by side with the machine's limits (not a test)."""
