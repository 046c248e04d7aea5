"""A TCP proxy on loopback that a test can cut and heal: a network partition between a worker
and the server (or Redis) without touching either. Cut, open connections are dropped and new ones
are accepted but stall (nothing is forwarded), as across a link that lost its packets; healed,
the stalled ones are closed and new ones go through again."""

from __future__ import annotations

import contextlib
import socket
import threading


class Proxy:
    def __init__(self, target_port: int, host: str = "127.0.0.1"):
        self.target = (host, target_port)
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
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with self._lock:
                    self._open.discard(s)
                _close(s)


def _close(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        s.close()
