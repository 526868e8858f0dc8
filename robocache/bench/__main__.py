"""``python -m robocache.bench``: the same as ``python -m robocache bench``."""
from . import main

raise SystemExit(main())
