"""What the staff commands (``admin.py``, ``admin_kinds.py``) share: the typed API (pydantic, the
full client's package) whose failures end the command with one sentence, and ``--json``."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pydantic import TypeAdapter

from raiprotocol.profile import ProfileError, load_profile
from raiprotocol.safejson import escaped

from .api import Api
from .errors import ApiError
from .session import fail


@contextmanager
def connected(server: str | None) -> Iterator[Api]:
    """An API session whose failures end the command with one line and the right exit status."""
    try:
        api = Api(load_profile(server))
    except ProfileError as exc:
        fail(str(exc))
        raise
    try:
        yield api
    except ApiError as exc:
        fail(str(exc), exc.code)
    finally:
        api.close()


def print_json(value: Any, kind: Any) -> None:
    """``value`` as JSON of the protocol model ``kind`` (e.g. ``list[AuditRow]``): what scripts read,
    with no control or bidi character raw (raiprotocol.safejson)."""
    sys.stdout.write(escaped(TypeAdapter(kind).dump_json(value, indent=2).decode()) + "\n")
    sys.stdout.flush()
