"""Objects that live as long as their process, set aside from Python's cycle collector. Dagster-free.

Loading the code location leaves some 200,000 objects tracked by the collector (Dagster's modules and
classes, the definitions, ours) that stay until the process ends. Every full collection walks all of them:
0.1-0.14 s each here. In a no-change ``make run`` of the lab one fell inside the same step every time:
``geocoded_localities``, whose skip of 71 species took 0.31-0.36 s without the freeze and 0.19-0.26 s
with it, in four alternating runs each. ``gc.freeze`` moves every object tracked now into a generation the
collector never walks. Reference counts still free them when nothing refers to them. Only a reference
cycle among them that later became garbage would be kept until the process ends; objects made to last the
whole process never become such garbage.
"""

import gc


def set_aside_long_lived_objects() -> None:
    """Leave every object alive now out of the collector's passes: once the code location is loaded, once
    a worker has imported the libraries its steps use, and when a command exits (its teardown passes)."""
    gc.freeze()
