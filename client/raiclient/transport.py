"""The client's one way to talk to the server: a kept-alive connection of the standard library's
``http.client`` with the profile's key, TLS (``tls.py``) and the environment's proxy, and the one
server-sent-events decoder. Every command uses it, ``submit`` without importing anything heavier
(typer, rich, httpx and pydantic cost a third of a second on a laptop). Failures are ApiErrors
with one sentence (``errors.py``)."""

from __future__ import annotations

import base64
import http.client
import json
import os
import socket
import ssl
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

from raiprotocol.profile import Profile, ProfileError, load_profile

from . import __version__, tls
from .errors import ApiError, broke_off, no_answer, refusal, unreachable, untrusted
from .output import error

CHUNK = 256 * 1024
Body = bytes | Iterable[bytes] | Any  # bytes, a file opened for reading, or chunks (sent chunked)


def proxy_for(scheme: str, host: str) -> str | None:
    """The proxy the environment names for this server (``*_proxy``, NO_PROXY honoured)."""
    env = {k.lower(): v for k, v in os.environ.items() if k.lower().endswith("_proxy") and v}
    for entry in env.get("no_proxy", "").split(","):
        entry = entry.strip().lstrip(".")
        if entry == "*" or (entry and (host == entry or host.endswith("." + entry))):
            return None
    return env.get(f"{scheme}_proxy") or env.get("all_proxy")


class Http:
    """One kept-alive connection to the server with the profile's key."""

    def __init__(self, profile: Profile | None, timeout: float = 30.0, server: str | None = None):
        """``profile``'s server with its key, or ``server`` without one (``/healthz``)."""
        self.server = server or (profile.server if profile else "")
        self.timeout = timeout
        self.reached = False  # a connection to the server was made in this run: it exists, so a break is passing
        url = urlsplit(self.server)
        self.base = url.path.rstrip("/")
        self.headers = {"User-Agent": f"raiclient/{__version__}"}
        if profile is not None:
            tls.use_profile(profile.ca_bundle)
            self.headers["Authorization"] = "Basic " + base64.b64encode(f"{profile.access_key}:{profile.secret_key}".encode()).decode()
        host, port, https = url.hostname or "", url.port, url.scheme == "https"
        proxy = proxy_for(url.scheme, host)
        if proxy is not None:
            p = urlsplit(proxy if "://" in proxy else "http://" + proxy)
            if p.username:
                self.headers["Proxy-Authorization"] = "Basic " + base64.b64encode(f"{p.username}:{p.password or ''}".encode()).decode()
            if not https:  # a plain-HTTP proxy takes the whole address in the request line
                self.base = f"http://{url.netloc.rpartition('@')[2]}{self.base}"
            host, port = p.hostname or "", p.port or (443 if p.scheme == "https" else 80)
        self.conn = (
            http.client.HTTPSConnection(host, port, timeout=timeout, context=tls.context(), blocksize=CHUNK)
            if https
            else http.client.HTTPConnection(host, port, timeout=timeout, blocksize=CHUNK)
        )
        if proxy is not None and https:
            self.conn.set_tunnel(url.hostname or "", url.port, headers={k: v for k, v in self.headers.items() if k.startswith("Proxy-")})

    def close(self) -> None:
        """Also makes the next request open a fresh connection (after a broken or abandoned one)."""
        self.conn.close()

    def send(
        self,
        method: str,
        path: str,
        params: dict[str, Any] | None = None,
        body: Body = None,
        headers: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> http.client.HTTPResponse:
        """The answer, whatever its status; transport failures are ApiErrors. A kept-alive
        connection the server closed while idle is opened again once, where the body allows."""
        url = self.base + path + (f"?{urlencode(params)}" if params else "")
        all_headers = {**self.headers, **(headers or {})}
        chunked = body is not None and not isinstance(body, bytes) and not hasattr(body, "read")
        for attempt in (1, 2):
            reused = self.conn.sock is not None
            start = body.tell() if hasattr(body, "tell") else None
            self._timeout(self.timeout if timeout is None else timeout)
            try:
                self.conn.request(method, url, body=body, headers=all_headers, encode_chunked=chunked)
            except ssl.SSLCertVerificationError as exc:
                raise untrusted(self.server, exc.verify_message or str(exc)) from None
            except (ConnectionRefusedError, socket.gaierror):
                raise unreachable(self.server) from None
            except TimeoutError:
                raise no_answer(self.server) from None
            except (http.client.CannotSendRequest, http.client.ResponseNotReady):
                self.close()  # an earlier answer left unread: start over on a fresh connection
                if attempt == 1:
                    continue
                raise broke_off(self.server) from None
            except OSError:
                if self.conn.sock is None:  # never connected
                    raise unreachable(self.server) from None
                # the server may have answered before reading the whole body (a refusal): read it below
            finally:
                self.reached = self.reached or self.conn.sock is not None
            try:
                return self.conn.getresponse()
            except TimeoutError:
                raise no_answer(self.server) from None
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self.close()
                again = body is None or isinstance(body, bytes) or (start is not None and _rewound(body, start))
                if attempt == 1 and reused and again:
                    continue  # the idle connection was gone: once more on a new one
                raise broke_off(self.server) from None
            except (http.client.HTTPException, OSError):
                self.close()
                raise broke_off(self.server) from None
        raise broke_off(self.server)  # not reached: the loop returns or raises

    def _timeout(self, seconds: float) -> None:
        self.conn.timeout = seconds
        if self.conn.sock is not None:
            self.conn.sock.settimeout(seconds)

    def read(self, resp: http.client.HTTPResponse) -> bytes:
        """The whole body of a success; a refusal's becomes its ApiError."""
        try:
            body = resp.read()
        except (http.client.HTTPException, OSError):
            self.close()
            raise broke_off(self.server) from None
        if not 200 <= resp.status < 300:
            raise refusal(resp.status, body, resp.reason, resp.getheader("Retry-After"))
        return body

    def json(self, method: str, path: str, json_body: Any = None, **kw: Any) -> Any:
        if json_body is not None:
            kw["body"] = json.dumps(json_body).encode()
            kw["headers"] = {"Content-Type": "application/json", **kw.get("headers", {})}
        return json.loads(self.read(self.send(method, path, **kw)))

    def download(self, path: str, dest: Path) -> int:
        """A body written to ``dest`` as it comes; returns its size."""
        resp = self.send("GET", path, timeout=60.0)
        if resp.status != 200:
            self.read(resp)
        written = 0
        try:
            with dest.open("wb") as fh:
                while chunk := resp.read(CHUNK):
                    fh.write(chunk)
                    written += len(chunk)
        except (http.client.HTTPException, OSError):
            self.close()
            raise ApiError(f"the download from {self.server} broke off; try again") from None
        return written

    def events(
        self, path: str, params: dict[str, str] | None = None, headers: dict[str, str] | None = None
    ) -> Iterator[tuple[str, str, str | None]]:
        """Server-sent events (name, data, id) until the stream ends; raises ApiError on a refusal
        (with its ``status`` and ``retry_after``) and lets OSError/HTTPException through when the
        connection breaks. A stream left before its end closes the connection. The first event is
        ("open", "", None), the moment the server accepts the stream (a reader that lost it knows
        it is back before anything else comes)."""
        resp = self.send("GET", path, params=params, headers={"Accept": "text/event-stream", **(headers or {})}, timeout=60.0)
        if resp.status != 200:
            raise refusal(resp.status, self.read_refusal(resp), resp.reason, resp.getheader("Retry-After"))
        done = False
        try:
            yield "open", "", None
            name, event_id = "message", None
            data: list[str] = []
            while True:
                raw = resp.readline()
                if not raw:
                    done = True
                    return
                line = raw.decode("utf-8", "replace").rstrip("\r\n")
                if not line:
                    if data:
                        yield name, "\n".join(data), event_id
                    name, data = "message", []
                    continue
                field, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if field == "event":
                    name = value
                elif field == "data":
                    data.append(value)
                elif field == "id":
                    event_id = value
        finally:
            if not done:
                self.close()

    def read_refusal(self, resp: http.client.HTTPResponse) -> bytes:
        try:
            return resp.read()
        except (http.client.HTTPException, OSError):
            self.close()
            return b""


def _rewound(body: Any, start: int) -> bool:
    try:
        body.seek(start)
        return True
    except (AttributeError, OSError, ValueError):
        return False


def connect(server: str | None) -> Http | None:
    """A connection with the caller's profile (``server`` overrides its URL); None, with the
    profile's trouble said on stderr, when there is none to use."""
    try:
        return Http(load_profile(server))
    except ProfileError as exc:
        error(str(exc))
        return None
