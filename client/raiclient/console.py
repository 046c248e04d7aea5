"""What every ``raiclient`` command shares: the consoles for tables, the ``--server`` option, the
client's own lines and errors (``output.say``), and an API session whose failures end the command
with one sentence."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import typer
from rich.console import Console

from raiprotocol.profile import ProfileError, load_profile
from raiprotocol.states import ExitCode

from .api import Api
from .errors import ApiError
from .output import error, say

__all__ = ["SERVER_OPT", "connected", "err", "fail", "open_api", "out", "say"]

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)
SERVER_OPT = typer.Option(None, "--server", envvar="RAI_SERVER", help="rai server URL (default: from your profile)")


def fail(message: str, code: int = ExitCode.CLIENT_ERROR) -> None:
    error(message)
    raise typer.Exit(code)


def open_api(server: str | None) -> Api:
    try:
        return Api(load_profile(server))
    except ProfileError as exc:
        fail(str(exc))
        raise  # unreachable


@contextmanager
def connected(server: str | None) -> Iterator[Api]:
    """An API session whose failures end the command with one line and the right exit status."""
    api = open_api(server)
    try:
        yield api
    except ApiError as exc:
        fail(str(exc), exc.code)
    finally:
        api.close()
