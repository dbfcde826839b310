"""Heavy libraries imported where first used, not when the code location loads. Dagster-free.

numpy, pyarrow, pyproj, shapely and DuckDB take 0.4 s of every process that loads the definitions (make
run, each Celery worker task's run, the UI's code server), and a run that skips everything never calls
them: a skip reads state rows and stamps. A module that needs one writes::

    if TYPE_CHECKING:
        import numpy as np
    else:
        np = LazyModule("numpy")

and uses ``np`` as before (the type checker sees the real module). The first attribute read imports the
module (``importlib.import_module``: thread-safe, once per process) and keeps the attribute on the proxy,
so later reads are plain attribute reads. A module-level constant built from such a library would import
it at once: build it in a cached function instead.
"""

from __future__ import annotations

import importlib
from typing import Any

# Every heavy library the steps import where first used: a process that lives for many steps (a Celery
# worker) imports them once when it starts (0.4 s here), not in the middle of its first steps.
HEAVY_MODULES = (
    "duckdb",
    "numpy",
    "PIL.Image",
    "pyarrow",
    "pyarrow.compute",
    "pyarrow.csv",
    "pyarrow.parquet",
    "pyproj",
    "shapely",
)


def import_heavy_modules() -> None:
    """Import every module of ``HEAVY_MODULES`` now (about 76 MB more in the process)."""
    for name in HEAVY_MODULES:
        importlib.import_module(name)


class LazyModule:
    """Stands for the module ``name`` until an attribute is read from it."""

    def __init__(self, name: str):
        self.__name = name

    def __getattr__(self, attribute: str) -> Any:
        # Only called for attributes not yet kept on the proxy.
        value = getattr(importlib.import_module(self.__name), attribute)
        setattr(self, attribute, value)
        return value

    def __repr__(self) -> str:
        return f"<lazily imported module {self.__name!r}>"
