"""``python -m raiclient``: the same as the ``raiclient`` command."""

from .entry import main

main()
