"""`python -m graphport ...`: the same command line as the `graphport` console script."""
from .cli import main

raise SystemExit(main())
