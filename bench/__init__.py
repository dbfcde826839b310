"""``make bench``: the project's code paths timed side by side with the machine's limits (not a test).

run.py is the runner (``python -m bench``, __main__.py): the command line, the sections it runs, and
results.md over them; at_size.py is the runner's too, four sections run in a row under one scorecard. Each
other module at this level is a section (load_paths, verification, lab_run, downloads, derive, masking,
regions, quality, whole_run, distributed_run, distributed) or a program the bench starts as a process
(materialize_range, step_windows, trivial_definitions). A section stands on shared/ only, never on the
runner nor on another section; test_layout.py checks that the imports have no loop.

Each section overwrites its one answer, results/<section>.md and .json; plain ``make bench`` writes
results.md and results.json over the sections it ran, the scorecard first.
"""
