"""Connections that cannot hold the server hostage: a request's headers must arrive within
``header_seconds``, its body may not stall for more than ``body_idle_seconds``, and one address
holds at most ``connections_per_address`` connections per server process.

Uvicorn times out only idle keep-alive connections: ~10,000 slow connections from one client (each
sending a header byte now and then) made `/healthz` fail for as long as they were held, and six
stalled uploads held 944 MB of temporary storage. This is uvicorn's httptools protocol with those
three rules added; a connection that breaks one is closed, which the app sees as a disconnect (an
upload's temporary file is removed). Behind a reverse proxy every connection comes from the proxy:
the proxy's addresses (RAI_TRUSTED_PROXIES) are exempt from the per-address cap and let it limit
per client, while clients that reach the server directly keep the cap.

It is also where a request's client address is decided (uvicorn's own proxy headers are off: they
believed any X-Forwarded-For that came through a proxy on 127.0.0.1): the TCP peer, or a trusted
proxy's X-Real-IP (``hardening.TrustedProxies``).

HTTPS (``raiserver serve --ssl-certfile/--ssl-keyfile``) is done here too, not by uvicorn: asyncio
wraps a TLS server's protocol so that it hears of a connection only once the handshake is over,
and 1,500 idle TCP connections that never began one stayed open 41 s, 15,699 at once, past the cap
and the header deadline. Here the TCP connection is this protocol's from accept (counted, and its
headers due ``header_seconds`` after it, handshake included) and TLS is started on it by hand.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import time
from asyncio.sslproto import SSLProtocol
from collections import Counter
from pathlib import Path
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.protocols.utils import get_remote_addr

from raiserver.access.hardening import TrustedProxies, trusted_proxies
from raiserver.config import load_settings

# how every server process is run (``raiserver serve``, ``raid dev``, the tests): this protocol, a
# short keep-alive, and a bounded graceful stop (a stuck request must not keep a stopping server up)
UVICORN_OPTIONS: dict[str, Any] = {
    "http": "raiserver.access.guard:GuardedHttpTools",
    "timeout_keep_alive": 5,
    "timeout_graceful_shutdown": 5,
    "proxy_headers": False,
}

BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\nretry-after: 10\r\n"
    b"connection: close\r\ncontent-length: 43\r\n\r\ntoo many connections from your address\r\n\r\n"
)


# `raiserver serve` names its certificate and key here for every server process it starts (uvicorn's
# own ssl options are left unset: see the module's docstring)
CERTFILE_ENV, KEYFILE_ENV = "RAI_SERVE_SSL_CERTFILE", "RAI_SERVE_SSL_KEYFILE"


def tls_context(certfile: str | Path, keyfile: str | Path) -> ssl.SSLContext:
    """The server side of HTTPS, with the standard library's defaults for a server."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(certfile), str(keyfile))
    return ctx


class Limits:
    """The three numbers, the trusted proxies and the TLS context (None: plain HTTP), read once per
    process from the server's settings and `serve`'s options."""

    header_seconds: float
    body_idle_seconds: float
    per_address: int
    proxies: TrustedProxies
    tls: ssl.SSLContext | None = None
    _loaded = False

    @classmethod
    def load(cls) -> type[Limits]:
        if not cls._loaded:
            s = load_settings()
            cls.header_seconds, cls.body_idle_seconds = s.header_seconds, s.body_idle_seconds
            cls.per_address, cls.proxies = s.connections_per_address, trusted_proxies(s)
            cert, key = os.environ.get(CERTFILE_ENV), os.environ.get(KEYFILE_ENV)
            cls.tls = tls_context(cert, key) if cert and key else None
            cls._loaded = True
        return cls


class _TcpSide(asyncio.BufferedProtocol):
    """Under TLS, the protocol of the TCP connection itself: everything goes on to the TLS layer,
    and the connection's end is also told to the guard, which asyncio's TLS layer does not do for a
    connection whose handshake never finished."""

    def __init__(self, tls: SSLProtocol, guard: GuardedHttpTools) -> None:
        self.tls, self.guard = tls, guard

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.tls.connection_made(transport)

    def get_buffer(self, sizehint: int) -> Any:
        return self.tls.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self.tls.buffer_updated(nbytes)

    def eof_received(self) -> None:
        self.tls.eof_received()

    def pause_writing(self) -> None:
        self.tls.pause_writing()

    def resume_writing(self) -> None:
        self.tls.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        try:
            self.tls.connection_lost(exc)
        finally:
            self.guard.tcp_lost()


class GuardedHttpTools(HttpToolsProtocol):
    """One connection; the class-wide counter knows every open connection of this process."""

    open_by_address: Counter[str] = Counter()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = Limits.load()
        self._address: str | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._in_body = False
        self._last_data = 0.0
        self._tcp: asyncio.Transport | None = None  # the TCP connection (under TLS, the one beneath)
        self._made = False  # uvicorn's side knows the connection (under TLS: once the handshake is over)

    # -- the connection's life --------------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if self._tcp is not None:  # TLS: the handshake is over, the deadline set at accept still runs
            self._made = True
            super().connection_made(transport)
            return
        self._tcp, tls = transport, self.limits.tls
        if tls is None:
            self._made = True
            super().connection_made(transport)
        peer = get_remote_addr(transport)
        self._address = peer[0] if peer else None
        if self._address is not None and self.limits.proxies.trusts(self._address):
            self._address = None  # a trusted proxy carries many clients; it limits them itself
        if self._address is not None:
            self.open_by_address[self._address] += 1
            if 0 < self.limits.per_address < self.open_by_address[self._address]:
                _closed[("over the connections per address", self._address)] += 1
                if tls is None:  # a TLS client would not understand it
                    transport.write(BUSY)
                transport.close()
                return
        self._await_headers()  # from accept: under TLS the handshake counts against it
        if tls is not None:
            self._start_tls(transport, tls)

    def _start_tls(self, transport: asyncio.Transport, tls: ssl.SSLContext) -> None:
        """What asyncio does for a TLS server, by hand: the TLS layer between the TCP connection
        and uvicorn's side, which it calls connection_made on once the handshake is over."""
        layer = SSLProtocol(
            self.loop,
            self,
            tls,
            None,  # type: ignore[arg-type]  # no waiter
            server_side=True,
            ssl_handshake_timeout=self.limits.header_seconds or None,  # type: ignore[arg-type]  # seconds
        )
        tcp = _TcpSide(layer, self)
        transport.set_protocol(tcp)
        tcp.connection_made(transport)

    def tcp_lost(self) -> None:
        """The TCP connection ended (under TLS): its place is given back whether or not the
        handshake was ever over."""
        self._cancel()
        self._release()

    def _release(self) -> None:
        if self._address is not None:
            self.open_by_address[self._address] -= 1
            if self.open_by_address[self._address] <= 0:
                del self.open_by_address[self._address]
            self._address = None

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel()
        self._release()
        if self._made:
            super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._last_data = time.monotonic()
        super().data_received(data)

    # -- the parser's callbacks ---------------------------------------------------------------------
    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._timer is None:  # the next request on a kept-alive connection: its headers are due
            self._await_headers()

    def on_headers_complete(self) -> None:
        self._cancel()
        self.limits.proxies.resolve(self.scope, self.headers)  # type: ignore[arg-type]  # a TypedDict: our key is an extra
        super().on_headers_complete()
        self._in_body = True
        self._arm(self.limits.body_idle_seconds)

    def on_message_complete(self) -> None:
        self._in_body = False
        self._cancel()
        super().on_message_complete()

    # -- the timer ----------------------------------------------------------------------------------
    def _await_headers(self) -> None:
        self._in_body = False
        self._arm(self.limits.header_seconds)

    def _arm(self, seconds: float) -> None:
        self._cancel()
        if seconds > 0:
            self._timer = self.loop.call_later(seconds, self._check)

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _check(self) -> None:
        self._timer = None
        if self._tcp is None or self._tcp.is_closing():
            return
        if self._in_body:
            idle = time.monotonic() - self._last_data
            # the app not reading (our own back-pressure) is no fault of the client's
            if (self.flow is not None and self.flow.read_paused) or idle < self.limits.body_idle_seconds:
                self._timer = self.loop.call_later(max(self.limits.body_idle_seconds - idle, 0.5), self._check)
                return
        _closed[("a stalled request body" if self._in_body else "request headers not in time", self._address)] += 1
        now = time.monotonic()
        if now - _last_report[0] > 10:  # an attack must not flood the log: one line per 10 s
            _last_report[0] = now
            for (why, address), n in _closed.most_common(5):
                self.logger.warning("closed %d connection(s) from %s: %s", n, address, why)
            _closed.clear()
        self._tcp.close()  # under TLS the TCP connection itself: no goodbye to wait for


_closed: Counter[tuple[str, str | None]] = Counter()
_last_report = [0.0]
