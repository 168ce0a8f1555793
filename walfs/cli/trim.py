"""`walfs trim`: see walfs.cli.retention."""

from walfs.cli.common import module_main
from walfs.cli.retention import trim_main as main

__all__ = ["main"]

if __name__ == "__main__":
    module_main("trim", main)
