"""`walfs trim`: see walfs.cli.retention."""

import sys

from walfs.cli.retention import trim_main as main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
