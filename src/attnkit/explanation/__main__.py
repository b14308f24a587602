"""``python -m attnkit.explanation ...``: the command of :mod:`attnkit.explanation.cli`."""

import sys

from attnkit.explanation.cli import main

sys.exit(main())
