"""``python -m attnkit`` (and ``torchrun ... -m attnkit train CONFIG.yaml``): the command line."""

import sys

from attnkit.cli import main

sys.exit(main())
