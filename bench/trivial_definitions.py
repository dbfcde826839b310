"""One trivial asset: what a single `dagster asset materialize` process costs with nothing to do."""

import dagster as dg


@dg.asset
def trivial() -> int:
    return 1


defs = dg.Definitions(assets=[trivial])
