"""What keeps a deployed server from being trivially abused: no default secrets off loopback,
generated secrets for one-command deployments, browser security headers, and a limit on failed
logins."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
import sys
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import Any

import redis
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from raiserver.config import DEFAULT_SECRETS, Settings
from raiserver.store.redis_keys import login_failures_of_address, login_failures_of_pair

MIN_SECRET_BYTES = 32
GENERATE_HINT = "generate one with: python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"


def is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


# headers a proxy adds: a request carrying any of them came through one (whoever claims otherwise)
FORWARDING_HEADERS = frozenset(
    (
        b"x-forwarded-for",
        b"x-real-ip",
        b"forwarded",
        b"x-forwarded-proto",
        b"x-forwarded-host",
        b"x-forwarded-port",
        b"x-client-ip",
        b"true-client-ip",
        b"via",
    )
)
PEER = "rai.peer"  # scope key: {"host": the TCP peer's address, "via_proxy": whether a proxy forwarded the request}
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class TrustedProxies:
    """The reverse proxies (RAI_TRUSTED_PROXIES) whose word about the client is believed.

    A client's own forwarding headers pass through nginx untouched, so X-Forwarded-For names
    whoever the client says: it is never read. The client's address comes only from X-Real-IP,
    which the proxy sets itself (``proxy_set_header X-Real-IP $remote_addr`` replaces whatever the
    client sent), and only when the connection comes from a configured proxy address; the
    scheme likewise from X-Forwarded-Proto. Empty: no forwarding header is believed at all."""

    def __init__(self, networks: list[Network]):
        self.networks = networks

    @classmethod
    def parse(cls, entries: list[str]) -> TrustedProxies:
        """From the setting's entries (addresses or networks); ValueError names a bad one."""
        networks: list[Network] = []
        for entry in entries:
            try:
                networks.append(ipaddress.ip_network(entry.strip().strip("[]"), strict=False))
            except ValueError:
                raise ValueError(f"RAI_TRUSTED_PROXIES: '{entry}' is not an IP address or network (e.g. 127.0.0.1, 10.0.0.0/8)") from None
        return cls(networks)

    def trusts(self, host: str | None) -> bool:
        if not self.networks or not host:
            return False
        try:
            address = ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            return False
        return any(address in network for network in self.networks)

    def resolve(self, scope: MutableMapping[str, Any], headers: list[tuple[bytes, bytes]]) -> None:
        """Set the scope's client (and scheme) for the app: the peer's own, or the trusted proxy's
        X-Real-IP; record the peer and whether the request came through a proxy (PEER)."""
        client = scope.get("client")
        peer = client[0] if client else None
        trusted = self.trusts(peer)
        scope[PEER] = {"host": peer, "via_proxy": trusted or any(name in FORWARDING_HEADERS for name, _ in headers)}
        if not trusted:
            return
        real = [value for name, value in headers if name == b"x-real-ip"]
        if len(real) == 1:  # the proxy sets exactly one; anything else is not its word
            with contextlib.suppress(ValueError):
                scope["client"] = (str(ipaddress.ip_address(real[0].decode("latin-1").strip())), 0)
        proto = [value.decode("latin-1").strip().lower() for name, value in headers if name == b"x-forwarded-proto"]
        if len(proto) == 1 and proto[0] in ("http", "https"):
            scope["scheme"] = proto[0]


def trusted_proxies(settings: Settings) -> TrustedProxies:
    """The setting, checked: a bad entry stops the server at start, named."""
    try:
        return TrustedProxies.parse(settings.trusted_proxies)
    except ValueError as exc:
        raise SystemExit(f"raiserver: {exc}") from None


def came_through_proxy(scope: Mapping[str, Any]) -> bool:
    """Whether the request came from a trusted proxy or carries forwarding headers: such a request
    is not this machine's own, even when its TCP peer is loopback (a proxy on the same host)."""
    peer = scope.get(PEER)
    if peer is not None:
        return bool(peer["via_proxy"])
    return any(name in FORWARDING_HEADERS for name, _ in scope.get("headers", []))  # served without our protocol


def private_files(settings: Settings) -> None:
    """What this process writes is for the server alone (umask 077): the SQLite database and its
    -wal/-shm/-journal companions (users' key hashes, the course's labels), archives, build folders
    and logs. Files and the storage folder left readable by an earlier release are closed too."""
    os.umask(0o077)
    paths = [settings.data_dir / "storage"]
    if settings.db_url.startswith("sqlite:///"):
        db = Path(settings.db_url.removeprefix("sqlite:///"))
        paths += [db, *(db.with_name(db.name + suffix) for suffix in ("-wal", "-shm", "-journal"))]
    for path in paths:
        try:
            if path.exists() and path.stat().st_mode & 0o077:
                path.chmod(0o700 if path.is_dir() else 0o600)
        except OSError:
            continue


def bind_host(argv: list[str] | None = None) -> str:
    """The address the server listens on: `raiserver serve` says it (RAI_BIND_HOST); under a bare
    uvicorn or gunicorn it is read from their command line."""
    if os.environ.get("RAI_BIND_HOST"):
        return os.environ["RAI_BIND_HOST"]
    argv = sys.argv if argv is None else argv
    for i, arg in enumerate(argv):
        for flag in ("--host", "--bind", "-b"):
            if arg == flag and i + 1 < len(argv):
                value = argv[i + 1]
            elif arg.startswith(flag + "="):
                value = arg.split("=", 1)[1]
            else:
                continue
            if flag != "--host":  # gunicorn: HOST:PORT
                value = value.rsplit(":", 1)[0] if value.count(":") == 1 or value.startswith("[") else value
            return value
    return os.environ.get("UVICORN_HOST", "127.0.0.1")


def weak_secrets(settings: Settings) -> list[str]:
    weak = []
    for name in ("worker_token", "session_secret", "pseudonym_secret"):
        value = getattr(settings, name)
        if value in DEFAULT_SECRETS or len(value.encode()) < MIN_SECRET_BYTES:
            weak.append(f"RAI_{name.upper()}")
    return weak


def check_deployment(settings: Settings, host: str) -> None:
    """Refuse to serve anyone but this machine with a default or short secret: with the default
    session secret anyone can forge an admin's cookie, with the default worker token anyone can
    fetch every student's archive and set job states."""
    trusted_proxies(settings)  # a bad RAI_TRUSTED_PROXIES stops here, before anyone is served
    weak = weak_secrets(settings)
    if weak and not is_loopback(host):
        raise SystemExit(
            f"raiserver: refusing to listen on {host} with {', '.join(weak)} at the default or shorter than "
            f"{MIN_SECRET_BYTES} bytes; set each (or RAI_SECRETS_FILE, which `raiserver secrets` writes); {GENERATE_HINT}"
        )


def write_secrets_file(path: Path, redis_host: str | None = None) -> bool:
    """Random secrets in a KEY=VALUE file (mode 0600) that server and workers read through
    RAI_SECRETS_FILE; kept if it exists. Returns whether it was written now."""
    if path.exists():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    password = secrets.token_hex(24)
    lines = [
        f"RAI_WORKER_TOKEN={secrets.token_urlsafe(32)}",
        f"RAI_SESSION_SECRET={secrets.token_urlsafe(32)}",
        f"RAI_PSEUDONYM_SECRET={secrets.token_urlsafe(32)}",
        f"RAI_REDIS_PASSWORD={password}",
    ]
    if redis_host:
        lines.append(f"RAI_REDIS_URL=redis://:{password}@{redis_host}/0")
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    os.replace(tmp, path)
    return True


class SecurityHeaders:
    """CSP with a per-response nonce for the pages' inline scripts, no framing, no sniffing; over
    HTTPS (served with TLS, or a trusted proxy's X-Forwarded-Proto), HSTS, so a browser that has
    been here once never again tries plain HTTP, where a session cookie could be stripped."""

    def __init__(self, app: ASGIApp, hsts_seconds: int = 0):
        self.app = app
        self.hsts = f"max-age={hsts_seconds}".encode() if hsts_seconds > 0 else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        nonce = secrets.token_urlsafe(16)
        scope.setdefault("state", {})["csp_nonce"] = nonce

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [
                    (
                        b"content-security-policy",
                        f"default-src 'self'; script-src 'self' 'nonce-{nonce}'; style-src 'self' 'unsafe-inline'; "
                        "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'self'; "
                        "form-action 'self'; object-src 'none'".encode(),
                    ),
                    (b"x-frame-options", b"DENY"),
                    (b"x-content-type-options", b"nosniff"),
                    (b"referrer-policy", b"same-origin"),
                ]
                if self.hsts is not None and scope.get("scheme") == "https":
                    headers.append((b"strict-transport-security", self.hsts))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_headers)


class LoginLimiter:
    """Failed logins, counted in Redis (shared by every server process) per (address, access key)
    pair and per address. A pair that failed ``per_key`` times in the window waits before it is
    heard again, 15 s and doubling with each further failure, at most 5 minutes: a guesser slows
    down, while the key's owner elsewhere (or behind the same NAT, with another key) is never
    refused. An address past ``per_ip`` failures gets 429 instead of 401 for wrong credentials,
    but right credentials are always checked and served: unauthenticated failures never deny an
    authenticated user. If Redis is out of reach the limit is skipped rather than locking everyone out."""

    FIRST_WAIT, LONGEST_WAIT = 15, 300

    def __init__(self, r: redis.Redis, per_ip: int, per_key: int, window: int = 600):
        self.redis, self.per_ip, self.per_key, self.window = r, per_ip, per_key, window

    @staticmethod
    def _pair(ip: str, key: str) -> str:
        return login_failures_of_pair(ip, key)

    def retry_after(self, ip: str, key: str) -> int | None:
        """Seconds this pair must still wait, or None when it may try."""
        try:
            ttl = int(self.redis.ttl(self._pair(ip, key) + ":wait"))
        except redis.RedisError:
            return None
        return ttl if ttl > 0 else None

    def refuse(self, ip: str, key: str) -> int | None:
        """A wrong login, for the API and the web view alike: seconds to wait when the address or
        the key is over its limit (this one counted), else None (answer "wrong keys")."""
        wait = self.retry_after(ip, key)
        return wait if wait is not None else self.failed(ip, key)

    def failed(self, ip: str, key: str) -> int | None:
        """Count a failure; returns seconds to wait (answer 429) or None (answer 401)."""
        pair, address = self._pair(ip, key), login_failures_of_address(ip)
        try:
            pipe = self.redis.pipeline()
            pipe.incr(address)
            pipe.expire(address, self.window)
            by_address = pipe.execute()[0]
            if by_address > self.per_ip:  # a flood from one address: no more state per key for it
                return max(int(self.redis.ttl(address)), 1)
            pipe.incr(pair)
            pipe.expire(pair, self.window)
            failures = pipe.execute()[0]
            if failures < self.per_key:
                return None
            wait = min(self.FIRST_WAIT * 2 ** (failures - self.per_key), self.LONGEST_WAIT)
            self.redis.set(pair + ":wait", 1, ex=wait)
        except redis.RedisError:
            return None
        return None  # this failure is answered 401; the next try waits
