"""What every ``raiclient`` command shares: tables that fit the terminal, ``--json``, the
``--server`` option, the client's own lines and errors (``output.say``), and an API session whose
failures end the command with one sentence."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import typer
from pydantic import TypeAdapter
from rich.console import Console, RenderableType
from rich.measure import Measurement
from rich.table import Table

from raiprotocol.profile import ProfileError, load_profile
from raiprotocol.safejson import escaped
from raiprotocol.states import ExitCode

from .api import Api
from .errors import ApiError
from .output import coloured, error, say

__all__ = ["JSON_OPT", "SERVER_OPT", "connected", "fail", "fit", "open_api", "print_json", "say", "show"]

SERVER_OPT = typer.Option(None, "--server", envvar="RAI_SERVER", help="rai server URL (default: from your profile)")
JSON_OPT = typer.Option(False, "--json", help="print the data as JSON (raiprotocol's models) and nothing else")


def console() -> Console:
    """stdout as rich sees it, coloured as ``--color`` and NO_COLOR say (made when used: the
    choice is read after the command line is)."""
    colour = coloured(sys.stdout)
    return Console(
        highlight=False, soft_wrap=True, force_terminal=colour or None, no_color=not colour, color_system="auto" if colour else None
    )


def show(*renderables: RenderableType, soft_wrap: bool | None = None) -> None:
    console().print(*renderables, soft_wrap=soft_wrap)


def print_json(value: Any, kind: Any) -> None:
    """``value`` as JSON of the protocol model ``kind`` (e.g. ``list[JobOut]``): what scripts read,
    with no control or bidi character raw (raiprotocol.safejson)."""
    sys.stdout.write(escaped(TypeAdapter(kind).dump_json(value, indent=2).decode()) + "\n")
    sys.stdout.flush()


def fit(columns: Sequence[str], rows: Sequence[Sequence[RenderableType]], drop: Sequence[str] = (), **table: Any) -> Table:
    """A table of whole values at the terminal's width: the columns named in ``drop`` (least useful
    first) are left out while it is wider; a value wider than what is left wraps (folds), never cut."""
    con = console()
    keep = list(columns)
    built = Table(**table)
    for gone in (None, *drop):
        if gone in keep:
            keep.remove(gone)
        built = Table(**table)
        for name in keep:
            built.add_column(name, overflow="fold")
        for row in rows:
            built.add_row(*(value for name, value in zip(columns, row, strict=False) if name in keep))
        if Measurement.get(con, con.options.update(max_width=10_000), built).maximum <= con.width:
            break
    return built


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
