"""A TCP proxy on loopback that a test can cut and heal: a network partition between a worker
and the server (or Redis) without touching either. Cut, open connections are dropped and new ones
are accepted but stall (nothing is forwarded), as across a link that lost its packets; healed,
the stalled ones are closed and new ones go through again. It can also be a slow link (``rate``:
an upload takes long enough for a test to restart the server in its middle) and lose one answer
(``lose_answer_after``: a request that landed whose answer never came back)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time


class Proxy:
    def __init__(self, target_port: int, host: str = "127.0.0.1", rate: float | None = None):
        """``rate``: bytes a second each connection forwards towards the target (None: as fast as it goes)."""
        self.target = (host, target_port)
        self.rate = rate
        self.sent = 0  # bytes forwarded towards the target, all connections together
        self.lose_answer_after: int | None = None  # once: a connection that sent this many bytes loses its answer
        self._sent_on: dict[socket.socket, int] = {}  # per connection, by its upstream socket
        self.listener = socket.create_server((host, 0))
        self.port = self.listener.getsockname()[1]
        self.cut_off = False
        self._open: set[socket.socket] = set()
        self._stalled: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, name=f"proxy-{self.port}", daemon=True).start()

    def cut(self) -> None:
        with self._lock:
            self.cut_off = True
            doomed = list(self._open)
        for s in doomed:
            _close(s)

    def heal(self) -> None:
        with self._lock:
            self.cut_off = False
            stalled, self._stalled = self._stalled, []
        for s in stalled:
            _close(s)

    def close(self) -> None:
        self._closed = True
        self.heal()
        _close(self.listener)
        self.cut()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self._lock:
                if self.cut_off:
                    self._stalled.append(client)
                    continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                _close(client)
                continue
            with self._lock:
                self._open.update((client, upstream))
                self._sent_on[upstream] = 0
            for a, b, up in ((client, upstream, upstream), (upstream, client, None)):
                threading.Thread(target=self._pump, args=(a, b, up), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, upstream: socket.socket | None) -> None:
        """``upstream``: set when this pump carries a client's bytes towards the target."""
        try:
            while True:
                data = src.recv(65536 if self.rate is None else max(1024, min(65536, int(self.rate / 20))))
                if not data:
                    break
                if upstream is None and self._loses_answer(src):
                    break
                dst.sendall(data)
                if upstream is not None:
                    with self._lock:
                        self.sent += len(data)
                        self._sent_on[upstream] = self._sent_on.get(upstream, 0) + len(data)
                    if self.rate is not None:
                        time.sleep(len(data) / self.rate)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with self._lock:
                    self._open.discard(s)
                    self._sent_on.pop(s, None)
                _close(s)

    def _loses_answer(self, upstream: socket.socket) -> bool:
        with self._lock:
            if self.lose_answer_after is None or self._sent_on.get(upstream, 0) < self.lose_answer_after:
                return False
            self.lose_answer_after = None
            return True


def _close(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        s.close()
