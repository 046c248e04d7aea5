"""What the client is, for both of its command lines (``entry``'s fast one and ``cli``'s full
one): its commands with their one-line help, submit's options, and the server's version. Standard
library only: the fast path imports it; ``cli`` imports it rather than ``entry`` (no cycle)."""

from __future__ import annotations

import os

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
    "kinds": "What you can submit: each kind's opening and your own deadline, and the limits you have left.",
    "limits": "Your limits now: jobs active, submissions and GPU minutes left, late days left.",
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
    "-p": ("path", True),
    "--path": ("path", True),
    "-q": ("queue", True),
    "--queue": ("queue", True),
    "--kind": ("kind", True),
    "-d": ("detach", False),
    "--detach": ("detach", False),
    "--server": ("server", True),
}


# logs' options as ``cli.logs`` declares them (the job is its one argument)
LOGS_OPTIONS: dict[str, tuple[str, bool]] = {
    "-f": ("follow", False),
    "--follow": ("follow", False),
    "--after": ("after", True),
    "--server": ("server", True),
}


def server_info(server: str | None) -> tuple[str | None, str | None]:
    """The server asked (``--server``'s, else RAI_SERVER, else the profile's) and its version;
    (None, None) without a server to ask, (server, None) when it does not answer. Never fails."""
    server = server or os.environ.get("RAI_SERVER")
    try:
        if not server:
            from raiprotocol.profile import load_profile  # reads the YAML profile; no network library

            server = load_profile(None).server
        from raiprotocol.profile import server_url

        url = server_url(server)
    except Exception:  # noqa: BLE001 - no profile: nothing to ask
        return None, None
    from .transport import Http

    conn = Http(None, timeout=5, server=url)
    try:
        info = conn.json("GET", "/healthz")
        return server, str(info.get("version", "?"))
    except Exception:  # noqa: BLE001
        return server, None
    finally:
        conn.close()


def server_version(server: str | None) -> str | None:
    """The server's version line (a courtesy); None without a server to ask."""
    asked, version = server_info(server)
    if asked is None:
        return None
    return f"server {asked}: raiserver {version}" if version else f"server {asked}: not reachable"
