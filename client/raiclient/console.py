"""What every ``raiclient`` command shares: the consoles, the ``--server`` option, the client's
own lines and errors, and an API session whose failures end the command with one sentence."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import typer
from rich.console import Console
from rich.text import Text

from raiprotocol.models import ExitCode
from raiprotocol.profile import ProfileError, load_profile

from .api import Api, ApiError

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)
SERVER_OPT = typer.Option(None, "--server", envvar="RAI_SERVER", help="rai server URL (default: from your profile)")


def say(*parts: str | tuple[str, str]) -> None:
    """One of the client's own lines. Parts are plain text (never markup: job ids, commands and
    messages come from users) or (text, style)."""
    out.print(Text.assemble(("✱ ", "bold cyan"), *parts))


def fail(message: str, code: int = ExitCode.CLIENT_ERROR) -> None:
    err.print(Text.assemble(("✱ error: ", "bold red"), message))
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
