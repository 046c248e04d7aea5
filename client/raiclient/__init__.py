"""raiclient: the student's command line for rai (the protocol it speaks is ``raiprotocol``)."""

__version__ = "0.1.0"
