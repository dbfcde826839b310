"""`make faults` (python -m faults): kill, restart, overlap and disconnect loads, and print the reliability
table. The machinery it drives (fault points, the harness, a private cluster) is the tests' own:
surveillance_pipeline_tests/support/faults/."""
