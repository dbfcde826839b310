"""``python -m surveillance_pipeline.bench``: see run.py."""

from surveillance_pipeline.bench.run import main

raise SystemExit(main())
