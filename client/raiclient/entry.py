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

SUMMARY = "Submit GPU jobs to rai and follow them live."
COMMANDS: dict[str, str] = {
    "submit": "Upload a project folder and run its rai_build.yml on a GPU worker.",
    "logs": "Print a job's log (whole, or live with --follow).",
    "status": "Show one job's state; the exit status is the job's, as with submit.",
    "queue": "Jobs waiting and running per queue, the workers serving it, and where your jobs stand.",
    "images": "The images each queue can run (those its live workers hold).",
    "history": "Your recent jobs, newest first.",
    "download": "Download a job's build folder as a .tar.gz.",
    "ranking": "The leaderboard: each team's fastest valid run (yours is marked -->).",
    "cancel": "Cancel a queued or running job.",
    "delete": "Free storage: delete finished jobs' archives and build folders (their logs and results stay).",
    "regrade": "Ask staff for a regrade of a run that has ended, saying why (one open request per run).",
    "regrades": "Your regrade requests and what became of them, newest first.",
    "login": "Check credentials with the server and write them to ~/.rai_profile.",
    "version": "Print the client's version (and the server's, when a profile names one that answers).",
    "admin": "Course management (instructors and admins).",
}


# submit's options as ``cli.submit`` declares them: name → (destination, takes a value)
SUBMIT_OPTIONS: dict[str, tuple[str, bool]] = {
    "-p": ("path", True), "--path": ("path", True), "-q": ("queue", True), "--queue": ("queue", True),
    "--kind": ("kind", True), "-d": ("detach", False), "--detach": ("detach", False), "--server": ("server", True),
}


class SubmitArgs(NamedTuple):
    path: str = "."
    queue: str | None = None
    kind: str = "dev"
    detach: bool = False
    server: str | None = None


def submit_args(args: list[str]) -> SubmitArgs | None:
    """``submit``'s options when every one is plain (``-p DIR``, ``--kind=m1``…), else None: help,
    mistakes and the unusual go to the full command line, which explains them."""
    found: dict[str, Any] = {}
    i = 0
    while i < len(args):
        name, eq, value = args[i].partition("=")
        if name not in SUBMIT_OPTIONS:
            return None
        dest, takes = SUBMIT_OPTIONS[name]
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
    return SubmitArgs(**found)


def help_text() -> str:
    width = max(map(len, COMMANDS)) + 2
    rows = "\n".join(f"  {name.ljust(width)}{text}" for name, text in COMMANDS.items())
    return (f"Usage: raiclient [OPTIONS] COMMAND [ARGS]...\n\n  {SUMMARY}\n\n"
            f"Options:\n  --help{' ' * (width - 4)}Show this message and exit.\n\n"
            f"Commands:\n{rows}\n\nraiclient COMMAND --help tells more about one command.\n")


def server_version(server: str | None) -> str | None:
    """The server's version line (a courtesy: never fails); None without a server to ask. The
    server is ``--server``'s, else RAI_SERVER, else the profile's."""
    server = server or os.environ.get("RAI_SERVER")
    try:
        if not server:
            from raiprotocol.profile import load_profile  # reads the YAML profile; no network library

            server = load_profile(None).server
        from raiprotocol.profile import server_url

        url = server_url(server)
    except Exception:  # noqa: BLE001 - no profile: nothing to ask
        return None
    from .transport import Http

    conn = Http(None, timeout=5, server=url)
    try:
        info = conn.json("GET", "/healthz")
        return f"server {server}: raiserver {info.get('version', '?')}"
    except Exception:  # noqa: BLE001
        return f"server {server}: not reachable"
    finally:
        conn.close()


def main(argv: list[str] | None = None) -> None:
    from .output import guard_pipes

    guard_pipes()
    argv = list(sys.argv if argv is None else argv)
    args = argv[1:]
    if args in ([], ["--help"], ["-h"]):
        sys.stdout.write(help_text())
        return
    if args == ["--version"] or (args[:1] == ["version"] and all(a != "--help" for a in args)
                                 and (len(args) == 1 or (args[1] == "--server" and len(args) == 3))):
        print(f"raiclient {__version__}", flush=True)
        line = server_version(args[2] if args[1:2] == ["--server"] else None) if args[:1] == ["version"] else None
        if line:
            print(line)
        return
    if args[:1] == ["submit"]:
        options = submit_args(args[1:])
        if options is not None:
            from pathlib import Path

            from .submit import run

            raise SystemExit(run(Path(options.path), options.queue, options.kind, options.detach, options.server))
    from .cli import main as full

    full()


if __name__ == "__main__":
    main()
