"""``raiserver``: run the service and manage its users from the operator's shell."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import typer
import uvicorn
from rich.console import Console

from raiprotocol.profile import Profile, write_profile
from raiprotocol.settings import settings_problem
from raiserver.access.auth import create_user, rotate_keys
from raiserver.access.guard import CERTFILE_ENV, KEYFILE_ENV, UVICORN_OPTIONS, tls_context
from raiserver.access.hardening import check_deployment, private_files, write_secrets_file
from raiserver.access.permissions import ROLES
from raiserver.config import Settings, load_settings
from raiserver.jobs.retention import apply_retention, mib
from raiserver.store.db import Database, migrate
from raiserver.store.storage import Storage
from raiserver.store.tables import User

app = typer.Typer(add_completion=False, no_args_is_help=True, help="The rai server.", rich_markup_mode=None)
console = Console(highlight=False)


def checked_settings() -> Settings:
    """The settings, validated once at start: a bad or renamed variable stops here, named. Every
    command that reads them may create the database or storage: those files are made private."""
    try:
        settings = load_settings()
    except ValueError as exc:  # pydantic's ValidationError
        Console(stderr=True).print(f"raiserver: bad settings: {settings_problem(exc)}", markup=False)
        raise typer.Exit(2) from None
    private_files(settings)
    return settings


@app.command()
def serve(
    host: str = "127.0.0.1",
    port: int = 8000,
    workers: int = 1,
    ssl_certfile: Path | None = typer.Option(None, "--ssl-certfile", help="serve HTTPS with this certificate (PEM)"),
    ssl_keyfile: Path | None = typer.Option(None, "--ssl-keyfile", help="and this key (PEM)"),
) -> None:
    """Run the API (migrates the database first). Off loopback, refuses default or short secrets.
    Behind a TLS-terminating proxy (the usual way) it serves plain HTTP; without one, give it a
    certificate and key."""
    os.environ["RAI_BIND_HOST"] = host
    check_deployment(checked_settings(), host)
    if bool(ssl_certfile) != bool(ssl_keyfile):
        Console(stderr=True).print("raiserver: HTTPS needs both --ssl-certfile and --ssl-keyfile", markup=False)
        raise typer.Exit(2)
    if ssl_certfile and ssl_keyfile:
        try:  # here, once, so that a bad file stops the start with its reason
            tls_context(ssl_certfile, ssl_keyfile)
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
            Console(stderr=True).print(f"raiserver: the certificate or key cannot be used: {exc}", markup=False)
            raise typer.Exit(2) from None
        # every server process does TLS in raiserver.access.guard, from the TCP accept on (not uvicorn:
        # its TLS layer hides a connection from the guard until the handshake is over)
        os.environ[CERTFILE_ENV], os.environ[KEYFILE_ENV] = str(ssl_certfile.resolve()), str(ssl_keyfile.resolve())
        console.print(f"raiserver: serving HTTPS on {host}:{port} (uvicorn's line below says http)")
    uvicorn.run("raiserver.asgi:app", host=host, port=port, workers=workers, log_level="info", **UVICORN_OPTIONS)


@app.command("secrets")
def secrets_cmd(
    file: Path = typer.Option(..., "--file", help="where to write them (kept if it exists)"),
    redis_host: str | None = typer.Option(None, help="also write RAI_REDIS_URL for Redis at this host:port"),
    redis_tls: bool = typer.Option(
        False, "--redis-tls", help="also make Redis's TLS certificate and its one-use CA (redis-ca.pem) beside the file"
    ),
) -> None:
    """Generate the deployment's secrets (worker token, session and pseudonym secrets, Redis
    password) once; server and workers read them with RAI_SECRETS_FILE. With --redis-tls, the
    certificate that Redis's TLS port shows to worker hosts (made once, kept like the secrets)."""
    made = write_secrets_file(file, redis_host)
    console.print(f"secrets {'written to' if made else 'already in'} {file}")
    if redis_tls:
        from raiserver.ops.redis_tls import CA_FILE, write_redis_tls

        try:
            made = write_redis_tls(file.parent)
        except (OSError, RuntimeError) as exc:
            Console(stderr=True).print(f"raiserver: Redis's TLS certificate could not be made: {exc}", markup=False)
            raise typer.Exit(1) from None
        said = "made" if made else "already there"
        console.print(f"Redis's TLS certificate {said}; other hosts' workers trust {file.parent / CA_FILE}", soft_wrap=True)


@app.command("migrate")
def migrate_cmd() -> None:
    """Bring the database schema up to date."""
    settings = checked_settings()
    migrate(Database(settings.db_url).engine)
    console.print(f"database at {settings.db_url.split('@')[-1]} is up to date")


def _private_stdout() -> None:
    """The profile holds a secret key: printed into a file (``> alice.profile``, made by the shell
    with the umask's mode, often 0644), the file is made the owner's alone first; one that cannot
    be (not ours) is refused, pointing to -o."""
    try:
        st = os.fstat(sys.stdout.fileno())
    except (OSError, ValueError):
        return  # not a file descriptor (captured): nothing others can read
    if not stat.S_ISREG(st.st_mode) or not st.st_mode & 0o077:
        return  # a terminal or a pipe, or a file already private
    try:
        os.fchmod(sys.stdout.fileno(), 0o600)
    except OSError:
        Console(stderr=True).print(
            "raiserver: the profile holds a secret key and standard output is a file others can read; write it with -o FILE", markup=False
        )
        raise typer.Exit(2) from None


@app.command("add-user")
def add_user(
    username: str,
    role: str = typer.Option("student", help=f"one of {', '.join(ROLES)}"),
    team: str | None = None,
    email: str | None = None,
    server_url: str = typer.Option("http://127.0.0.1:8000", "--server-url", help="URL written into the profile"),
    profile: Path | None = typer.Option(
        None, "-o", "--output", "--profile", help="write the ready-to-use profile to this file (mode 0600, whatever the umask)"
    ),
) -> None:
    """Create a user (or give an existing one new keys) and print/write their profile."""
    if profile is None:
        _private_stdout()  # before any key is made: a refusal changes nothing
    settings = checked_settings()
    db = Database(settings.db_url)
    migrate(db.engine)
    with db.session() as s:
        user = s.query(User).filter_by(username=username).one_or_none()
        if user is None:
            user, secret = create_user(s, username, role, team=team, email=email)
        else:
            secret = rotate_keys(s, user)
        prof = Profile(
            username=user.username, access_key=user.access_key, secret_key=secret, server=server_url, team=user.team, email=user.email
        )
    if profile:
        write_profile(prof, profile)
        console.print(f"profile for {username} written to {profile}")
    else:
        from raiprotocol.profile import dump_profile

        console.print(dump_profile(prof))


@app.command("retention")
def retention_cmd(
    apply: bool = typer.Option(False, "--apply", help="delete the files (without it: only say what would go)"),
) -> None:
    """Free storage by the retention rules: archives and build folders of finished runs of other kinds
    than the verified one after RAI_RETAIN_DAYS, their logs after RAI_RETAIN_LOG_DAYS."""
    settings = checked_settings()
    db = Database(settings.db_url)
    migrate(db.engine)
    storage = Storage(settings.data_dir / "storage")
    with db.session() as s:
        sweep = apply_retention(s, storage, settings, apply)
    verb = "freed" if apply else "would free"
    console.print(
        f"{verb} {mib(sweep.freed)}: files of {sweep.jobs} run(s) older than {settings.retain_days} days, "
        f"logs of {sweep.logs} run(s) older than {settings.retain_log_days} days "
        f"('{settings.verified_kind}' runs are kept)" + ("" if apply else "; run again with --apply to delete them")
    )


def main() -> None:
    app()


if __name__ == "__main__":
    main()
