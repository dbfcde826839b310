"""The commands the Makefile runs, above the code location: make run (run.py), make verify (verify.py),
and the pool limits make ui sets first (pools.py)."""
