"""What the client is: its version and the server's (``raiclient version``, ``--version``).
Standard library only."""

from __future__ import annotations

import argparse
import os
import sys

from . import __version__


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


def version(args: argparse.Namespace) -> int:
    """``raiclient version [--json]``: ours first (at once), then the server's when it answers."""
    if args.as_json:
        from raiprotocol.safejson import dumps

        asked, server_ver = server_info(args.server)
        sys.stdout.write(dumps({"client": __version__, "server": asked, "server_version": server_ver}) + "\n")
        return 0
    print(f"raiclient {__version__}", flush=True)
    line = server_version(args.server)
    if line:
        print(line)
    return 0
