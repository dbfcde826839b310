"""What the code location loads is set aside from the cycle collector, so its full passes (0.1 s each
here) no longer fall inside steps."""

import json
import subprocess
import sys


def test_loading_the_definitions_leaves_the_collector_only_what_comes_after():
    probe = (
        "import gc, json\n"
        "import surveillance_pipeline.definitions\n"
        "print(json.dumps([gc.get_freeze_count(), len(gc.get_objects())]))\n"
    )
    completed = subprocess.run(  # noqa: S603  # this interpreter, a fixed program
        [sys.executable, "-c", probe], check=True, capture_output=True, text=True
    )
    frozen, walked = json.loads(completed.stdout.strip().splitlines()[-1])
    # Dagster's modules and classes, the definitions and ours: about 190,000 objects here.
    assert frozen > 100_000
    # What the collector still walks: only what the probe made after the import.
    assert walked < 1_000
