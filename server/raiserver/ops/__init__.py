"""The operator's side: the command line, the one-machine launcher, metrics, and the loops every server process runs in the background."""
