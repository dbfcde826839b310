"""Heavy libraries wait for their first use: loading the definitions imports none of them."""

import json
import subprocess
import sys

from surveillance_pipeline.core.lazy_modules import HEAVY_MODULES, LazyModule

# The packages a worker imports when it starts (HEAVY_MODULES), and geopandas, which nothing imports.
HEAVY = tuple(sorted({name.partition(".")[0] for name in HEAVY_MODULES} | {"geopandas"}))


def test_loading_the_definitions_imports_no_heavy_library():
    probe = (
        "import json, sys\n"
        "import surveillance_pipeline.definitions\n"
        f"print(json.dumps([name for name in {HEAVY!r} if name in sys.modules]))\n"
    )
    completed = subprocess.run(  # noqa: S603  # this interpreter, a fixed program
        [sys.executable, "-c", probe], check=True, capture_output=True, text=True
    )
    assert json.loads(completed.stdout.strip().splitlines()[-1]) == []


def test_a_lazy_module_imports_on_first_read_and_keeps_what_it_read():
    lazy_json = LazyModule("json")
    assert "dumps" not in vars(lazy_json)
    assert lazy_json.dumps({"b": 1, "a": 2}, sort_keys=True) == '{"a": 2, "b": 1}'
    assert vars(lazy_json)["dumps"] is json.dumps
