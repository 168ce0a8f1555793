"""`python -m walfs VERB ...` is the same as `walfs VERB ...`."""

import sys

from walfs.cli import main

sys.exit(main())
