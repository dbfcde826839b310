"""``python -m bench``: see run.py."""

from bench.run import main

raise SystemExit(main())
