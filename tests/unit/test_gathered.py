"""Bulk output from the Docker engine comes in pipe-page pieces; the worker joins what follows a
bulk piece within a moment into one batch (one Redis call, one live event), and passes small
pieces on at once (issue 38)."""

from __future__ import annotations

import socket
import threading
import time

from raiworker.terminal import GATHER_FROM, GATHER_S, gathered


def test_pieces_that_follow_a_bulk_piece_join_it():
    a, b = socket.socketpair()
    with a, b:
        first = b"x" * GATHER_FROM
        a.sendall(b"y" * 1000)

        def later():
            time.sleep(GATHER_S / 5)
            a.sendall(b"z" * 500)

        t = threading.Thread(target=later)
        t.start()
        data, ended = gathered(b, first)
        t.join()
        assert data == first + b"y" * 1000 + b"z" * 500 and not ended


def test_a_small_piece_goes_on_at_once():
    a, b = socket.socketpair()
    with a, b:
        a.sendall(b"more")
        t0 = time.monotonic()
        assert gathered(b, b"Op Time: 1.2 ms\n") == (b"Op Time: 1.2 ms\n", False)
        assert time.monotonic() - t0 < GATHER_S / 2
        assert b.recv(10) == b"more"  # left for the next read


def test_gathering_stops_at_the_streams_end_and_says_so():
    a, b = socket.socketpair()
    with b:
        a.sendall(b"tail")
        a.close()
        assert gathered(b, b"x" * GATHER_FROM) == (b"x" * GATHER_FROM + b"tail", True)


def test_gathering_waits_no_longer_than_its_moment():
    a, b = socket.socketpair()
    with a, b:
        t0 = time.monotonic()
        assert gathered(b, b"x" * GATHER_FROM) == (b"x" * GATHER_FROM, False)
        assert time.monotonic() - t0 < GATHER_S + 0.05
