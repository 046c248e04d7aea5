"""The operator's side: the command line, the one-machine launcher and metrics (the background loops are ``raiserver.services``)."""
