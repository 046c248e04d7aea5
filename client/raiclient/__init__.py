"""raiclient: the student's side of rai, plus the models the server and worker share."""

__version__ = "0.1.0"
