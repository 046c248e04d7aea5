"""raiprotocol: what the client, the server and the worker must agree on, in one place.

The wire models (``models``), the build file (``spec``), what an acceptable project archive is
(``archive``), the Redis key names and the task name (``keys``), the log-entry encoding
(``logwire``), the log markers the server reads back (``markers``), JSON safe for a terminal
(``safejson``), and the profile file (``profile``) that the client reads and ``raid dev`` writes.
The student's ``raiclient`` is a user of this package, not its home.
"""

__version__ = "0.1.0"
