"""The ``raiclient`` command's entry point: answers ``--help`` and ``version``, and runs ``submit``,
before importing typer, rich, httpx or pydantic (a third of a second on a student's laptop); it
hands everything else to the full command line in ``cli.py``.

``COMMANDS`` is the top-level help and ``SUBMIT_OPTIONS`` the submit options read here; tests keep
them equal to what ``cli.py`` registers.
"""

from __future__ import annotations

import os
import sys
from typing import Any, NamedTuple

from . import __version__
from .about import COMMANDS, LOGS_OPTIONS, SUBMIT_OPTIONS, SUMMARY, server_version

__all__ = ["COMMANDS", "SUBMIT_OPTIONS", "SUMMARY", "SubmitArgs", "color_arg", "help_text", "main", "submit_args"]


class SubmitArgs(NamedTuple):
    path: str = "."
    queue: str | None = None
    kind: str = "dev"
    detach: bool = False
    server: str | None = None


def plain_options(args: list[str], options: dict[str, tuple[str, bool]], positional: str | None = None) -> dict[str, Any] | None:
    """The options (and at most one ``positional`` argument) when every one is plain (``-p DIR``,
    ``--kind=m1``…), else None: help, mistakes and the unusual go to the full command line, which
    explains them."""
    found: dict[str, Any] = {}
    i = 0
    while i < len(args):
        name, eq, value = args[i].partition("=")
        if name not in options:
            if positional is None or positional in found or name.startswith("-"):
                return None
            found[positional] = args[i]
            i += 1
            continue
        dest, takes = options[name]
        if not takes:
            if eq:
                return None
            found[dest] = True
        elif eq:
            found[dest] = value
        elif i + 1 < len(args) and not args[i + 1].startswith("-"):
            found[dest] = args[i + 1]
            i += 1
        else:
            return None
        i += 1
    return found


def submit_args(args: list[str]) -> SubmitArgs | None:
    """``submit``'s options when every one is plain, else None."""
    found = plain_options(args, SUBMIT_OPTIONS)
    return None if found is None else SubmitArgs(**found)


def logs_args(args: list[str]) -> dict[str, Any] | None:
    """``logs``' job and options when plain (``logs``, ``logs JOB -f``, ``logs JOB --after 40``), else None."""
    found = plain_options(args, LOGS_OPTIONS, positional="job_id")
    if found is None or not str(found.get("after", "0")).isdigit():
        return None
    return {
        "job_id": found.get("job_id"),
        "follow": found.get("follow", False),
        "after": int(found.get("after", 0)),
        "server": found.get("server"),
    }


OPTIONS: dict[str, str] = {
    "--color [auto|always|never]": "Colour codes: auto (on a terminal, unless NO_COLOR is set), always, never.",
    "--install-completion": "Install completion for the current shell.",
    "--show-completion": "Show completion for the current shell, to copy it or customize the installation.",
    "--help": "Show this message and exit.",
}


def help_text() -> str:
    width = max(map(len, [*COMMANDS, *OPTIONS])) + 2
    rows = "\n".join(f"  {name.ljust(width)}{text}" for name, text in COMMANDS.items())
    options = "\n".join(f"  {name.ljust(width)}{text}" for name, text in OPTIONS.items())
    return (
        f"Usage: raiclient [OPTIONS] COMMAND [ARGS]...\n\n  {SUMMARY}\n\n"
        f"Options:\n{options}\n\n"
        f"Commands:\n{rows}\n\nraiclient COMMAND --help tells more about one command.\n"
    )


def color_arg(args: list[str]) -> tuple[str | None, list[str]]:
    """``--color MODE`` (or ``--color=MODE``) wherever it is on the command line, and the rest:
    it is the whole command line's option, so ``raiclient logs JOB --color always`` works too."""
    mode: str | None = None
    rest: list[str] = []
    i = 0
    while i < len(args):
        if args[i] == "--":
            rest += args[i:]
            break
        name, eq, value = args[i].partition("=")
        if name == "--color" and (eq or i + 1 < len(args)):
            mode = value if eq else args[i + 1]
            i += 1 if eq else 2
            continue
        rest.append(args[i])
        i += 1
    return mode, rest


def main(argv: list[str] | None = None) -> None:
    from .output import error, guard_pipes, set_color

    guard_pipes()
    argv = list(sys.argv if argv is None else argv)
    mode, args = color_arg(argv[1:])
    if mode is not None:
        try:
            set_color(mode)
        except ValueError as exc:
            error(str(exc))
            raise SystemExit(2) from None
    listing = None
    if os.environ.get("_RAICLIENT_COMPLETE"):  # the shell asks for completions: the full command line answers
        args = argv[1:]
    elif args in ([], ["--help"], ["-h"]):
        sys.stdout.write(help_text())
        return
    elif args == ["--version"] or (
        args[:1] == ["version"] and all(a != "--help" for a in args) and (len(args) == 1 or (args[1] == "--server" and len(args) == 3))
    ):
        print(f"raiclient {__version__}", flush=True)
        line = server_version(args[2] if args[1:2] == ["--server"] else None) if args[:1] == ["version"] else None
        if line:
            print(line)
        return
    elif args[:1] == ["submit"]:
        options = submit_args(args[1:])
        if options is not None:
            from pathlib import Path

            from .submit import run

            raise SystemExit(run(Path(options.path), options.queue, options.kind, options.detach, options.server))
    elif args[:1] == ["logs"]:
        plain = logs_args(args[1:])
        if plain is not None:
            from .follow import show_log

            raise SystemExit(show_log(**plain))
    else:
        from .listings import listing_args

        listing = listing_args(args)
    if listing is not None:
        from . import listings

        raise SystemExit(listings.run(listing))
    _full_client_or_say_how(args)
    from .cli import main as full

    full([*(["--color", mode] if mode else []), *args])


def _full_client_or_say_how(args: list[str]) -> None:
    """The full command line needs typer, rich and pydantic; ``raiclient.pyz`` on a bare Python has
    none of them: say what runs without them and how to get the rest, instead of a traceback."""
    import importlib.util

    missing = [name for name in ("typer", "rich", "pydantic", "pydantic_core") if importlib.util.find_spec(name) is None]
    if not missing:
        return
    from .about import server_info
    from .output import error

    server = server_info(None)[0] or "SERVER"
    error(
        f"'raiclient {' '.join(args[:2])}' needs the full client ({', '.join(missing)} not installed here). Without it, "
        "this raiclient runs submit, logs, version, --help, and history/status/queue/images/ranking with --json. "
        f"The full client: pip install --find-links {server.rstrip('/')}/client/ raiclient"
    )
    raise SystemExit(2)


if __name__ == "__main__":
    main()
