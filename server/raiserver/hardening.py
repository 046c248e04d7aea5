"""What keeps a deployed server from being trivially abused: no default secrets off loopback,
generated secrets for one-command deployments, browser security headers, and a limit on failed
logins."""

from __future__ import annotations

import hashlib
import ipaddress
import os
import secrets
import sys
from pathlib import Path

import redis
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .config import DEFAULT_SECRETS, Settings

MIN_SECRET_BYTES = 32
GENERATE_HINT = "generate one with: python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"


def is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


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
    weak = weak_secrets(settings)
    if weak and not is_loopback(host):
        raise SystemExit(
            f"raiserver: refusing to listen on {host} with {', '.join(weak)} at the default or shorter than "
            f"{MIN_SECRET_BYTES} bytes; set each (or RAI_SECRETS_FILE, which `raiserver secrets` writes); {GENERATE_HINT}")


def write_secrets_file(path: Path, redis_host: str | None = None) -> bool:
    """Random secrets in a KEY=VALUE file (mode 0600) that server and workers read through
    RAI_SECRETS_FILE; kept if it exists. Returns whether it was written now."""
    if path.exists():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    password = secrets.token_hex(24)
    lines = [f"RAI_WORKER_TOKEN={secrets.token_urlsafe(32)}", f"RAI_SESSION_SECRET={secrets.token_urlsafe(32)}",
             f"RAI_PSEUDONYM_SECRET={secrets.token_urlsafe(32)}", f"RAI_REDIS_PASSWORD={password}"]
    if redis_host:
        lines.append(f"RAI_REDIS_URL=redis://:{password}@{redis_host}/0")
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    os.replace(tmp, path)
    return True


class SecurityHeaders:
    """CSP with a per-response nonce for the pages' inline scripts, no framing, no sniffing."""

    def __init__(self, app: ASGIApp):
        self.app = app

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
                    (b"content-security-policy",
                     f"default-src 'self'; script-src 'self' 'nonce-{nonce}'; style-src 'self' 'unsafe-inline'; "
                     "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'self'; "
                     "form-action 'self'; object-src 'none'".encode()),
                    (b"x-frame-options", b"DENY"),
                    (b"x-content-type-options", b"nosniff"),
                    (b"referrer-policy", b"same-origin"),
                ]
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
        return f"rai:loginfail:pair:{ip}:{hashlib.sha256(key[:128].encode()).hexdigest()[:24]}"

    def retry_after(self, ip: str, key: str) -> int | None:
        """Seconds this pair must still wait, or None when it may try."""
        try:
            ttl = int(self.redis.ttl(self._pair(ip, key) + ":wait"))
        except redis.RedisError:
            return None
        return ttl if ttl > 0 else None

    def failed(self, ip: str, key: str) -> int | None:
        """Count a failure; returns seconds to wait (answer 429) or None (answer 401)."""
        pair, address = self._pair(ip, key), f"rai:loginfail:ip:{ip}"
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
