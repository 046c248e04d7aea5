"""raiworker: runs rai jobs on a GPU host."""
