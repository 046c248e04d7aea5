"""raiworker: runs rai jobs on a GPU host."""

__version__ = "0.1.0"
