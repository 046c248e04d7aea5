"""``raiclient login``: check the keys with the server and write ``~/.rai_profile``, on the
standard library (the one-file client's own messages send students here)."""

from __future__ import annotations

import argparse
import getpass
import sys

from raiprotocol.profile import Profile, ProfileError, load_profile, server_url, write_profile
from raiprotocol.states import ExitCode

from .errors import ApiError
from .output import say
from .session import fail
from .transport import Http


def _known_server() -> str | None:
    """The server the profile already names, offered as the prompt's default."""
    try:
        return load_profile(None).server
    except ProfileError:
        return None


def _ask(prompt: str, default: str | None = None, secret: bool = False) -> str:
    """One answer at the terminal (the default on an empty line); Ctrl-D or Ctrl-C end the command."""
    shown = f"{prompt} [{default}]: " if default else f"{prompt}: "
    try:
        answer = getpass.getpass(shown) if secret else input(shown)
    except (EOFError, KeyboardInterrupt):
        sys.stdout.write("\n")
        raise SystemExit(ExitCode.CLIENT_ERROR) from None
    return answer.strip() or default or ""


def main(args: argparse.Namespace) -> int:
    server, access_key, secret_key = args.server, args.access_key, args.secret_key
    known = _known_server()
    if None in (server or known, access_key, secret_key) and not sys.stdin.isatty():
        missing = [
            flag for flag, value in (("--server", server or known), ("--access-key", access_key), ("--secret-key", secret_key)) if not value
        ]
        fail(
            f"no terminal to ask on: give {', '.join(missing)} (e.g. raiclient login --server https://rai.example.edu "
            "--access-key KEY --secret-key SECRET)"
        )
    server = server or _ask("Server", known)
    access_key = access_key or _ask("Access key")
    secret_key = secret_key or _ask("Secret key", secret=True)
    try:
        profile = Profile(access_key=access_key.strip(), secret_key=secret_key.strip(), server=server_url(server))
    except ProfileError as exc:
        fail(str(exc))
        raise
    conn = Http(profile)
    try:
        me = conn.json("GET", "/api/v1/me")
    except ApiError as exc:
        if exc.status == 401:  # not "run raiclient login": this is it
            fail(
                f"the server at {profile.server} did not accept these keys; check them (copy them whole) or ask your "
                "instructor for new ones",
                exc.code,
            )
        fail(str(exc), exc.code)
        raise
    finally:
        conn.close()
    fields = ("username", "email", "team", "firstname", "lastname")
    profile = profile.with_(**{k: me.get(k) for k in fields})
    path = write_profile(profile)
    say(f"Logged in as {me['username']} ({me['role']}); profile written to {path}")
    return ExitCode.OK
