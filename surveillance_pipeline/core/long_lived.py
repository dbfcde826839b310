"""Objects that live as long as their process, set aside from Python's cycle collector. Dagster-free.

Loading the code location leaves some 200,000 objects tracked by the collector (Dagster's modules and
classes, the definitions, ours) that stay until the process ends. Every full collection walks all of them:
0.1-0.14 s each here. In a no-change ``make run`` of the lab one fell inside the same step every time
(``geocoded_localities``, whose skip of 71 species then took 0.32-0.43 s against 0.19-0.29 s for the
others). ``gc.freeze`` moves every object tracked now into a generation the collector never walks. They
are still freed by their reference counts when nothing refers to them; only a reference cycle among them
that became garbage would be kept until the process ends, and objects made for the whole process do not.
"""

import gc


def set_aside_long_lived_objects() -> None:
    """Leave every object alive now out of the collector's passes: once the code location is loaded, once
    a worker has imported the libraries its steps use, and when a command exits (its teardown passes)."""
    gc.freeze()
