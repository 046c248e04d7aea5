"""The rules of riding over the server's passing trouble (issue 51): which failures are tried again
(the connection's and the server's own, once it was reached; never the student's 4xx), how long
(one window, the log follower's), how it is said (one line at the loss, one when it went through),
and which database errors the server answers with 503 rather than 500."""

from __future__ import annotations

import pytest
from sqlalchemy import exc

from raiclient import reconnect
from raiclient.errors import ApiError, broke_off, refusal, unreachable
from raiserver.store.db import AWAY_TYPES, away


class FakeConn:
    """What riding uses of the transport: whether this run reached the server, close(), and the
    probe (``json``) whose outcomes are given in turn (then it answers)."""

    def __init__(self, reached: bool = True, probes: tuple[Exception, ...] = ()):
        self.reached, self.closed, self.probes, self.probed = reached, 0, list(probes), 0

    def close(self) -> None:
        self.closed += 1

    def json(self, method: str, path: str) -> dict:
        assert (method, path) == ("GET", reconnect.PROBE)
        self.probed += 1
        if self.probes:
            raise self.probes.pop(0)
        return {}


def calls(*outcomes: object):
    """A call that raises or returns each outcome in turn; ``.made`` counts the calls."""
    left = list(outcomes)

    def call() -> object:
        call.made += 1  # type: ignore[attr-defined]
        outcome = left.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    call.made = 0  # type: ignore[attr-defined]
    return call


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch):
    slept: list[float] = []
    monkeypatch.setattr(reconnect.time, "sleep", slept.append)
    return slept


def test_a_cut_upload_is_sent_again_once_the_server_answers_and_said_once_on_a_pipe(capsys, no_sleep):
    conn = FakeConn(probes=(unreachable("http://s"), unreachable("http://s")))  # restarting: asked, not sent into
    call = calls(broke_off("http://s"), {"id": "J"})
    assert reconnect.riding(conn, call, "the upload", "sending it again from the start") == {"id": "J"}
    assert call.made == 2 and conn.probed == 3 and conn.closed == 3 and len(no_sleep) == 3
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2, lines
    assert lines[0] == "✱ the server went away during the upload; retrying (sending it again from the start)…"
    assert lines[1].startswith("✱ reconnected after ") and lines[1].endswith(" s; sending it again from the start")


def test_the_students_own_refusals_and_a_server_never_reached_fail_at_once(capsys, no_sleep):
    for refused in (refusal(413, b'{"detail": "too big"}', "", None), refusal(429, b'{"detail": "quota"}', "", "30")):
        with pytest.raises(ApiError) as raised:
            reconnect.riding(FakeConn(), calls(refused), "the upload", "again")
        assert raised.value is refused
    with pytest.raises(ApiError, match="cannot reach"):  # a wrong address is not waited on for 5 minutes
        reconnect.riding(FakeConn(reached=False), calls(unreachable("http://s")), "the upload", "again")
    assert no_sleep == [] and capsys.readouterr().err == ""
    revoked = refusal(401, b'{"detail": "unknown access key"}', "", None)  # found on the way back: said at once
    with pytest.raises(ApiError, match="rejected your credentials"):
        reconnect.riding(FakeConn(probes=(revoked,)), calls(broke_off("http://s")), "the upload", "again")


def test_the_servers_503_is_waited_out_as_long_as_it_asks(capsys, no_sleep):
    away = refusal(503, b'{"detail": "the service\'s database is unavailable; try again in 5 s"}', "", "5")
    assert away.transient and str(away) == "the service's database is unavailable; try again in 5 s"
    conn = FakeConn(probes=(away,))  # still away when asked: waited again as it asks
    assert reconnect.riding(conn, calls(away, "done"), "the upload", "again") == "done"
    assert no_sleep == [5.0, 5.0]
    assert "the server is unavailable during the upload (the service's database is unavailable" in capsys.readouterr().err


def test_it_gives_up_after_the_window_with_the_last_reason_and_where_to_look(monkeypatch, capsys):
    monkeypatch.setenv("RAI_RECONNECT_SECONDS", "10")
    clock = [100.0]
    monkeypatch.setattr(reconnect.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(reconnect.time, "sleep", lambda s: clock.__setitem__(0, clock[0] + s))
    gone = FakeConn(probes=tuple(unreachable("http://s") for _ in range(200)))
    with pytest.raises(ApiError) as raised:
        reconnect.riding(gone, calls(broke_off("http://s")), "the upload", "again")
    text = str(raised.value)
    assert text.startswith("cannot reach the rai server at http://s") and "gave up on the upload after 10 s" in text
    assert "raiclient history" in text and raised.value.code == 2
    assert clock[0] == pytest.approx(110.0)  # never a pause past the window


def test_pauses_grow_to_a_cap_and_never_pass_the_window(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(reconnect.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(reconnect.random, "random", lambda: 0.5)  # the jitter's middle: the delay itself
    backoff = reconnect.Backoff(give_up_after=100)
    pauses = [backoff.pause() for _ in range(9)]
    assert pauses == [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    clock[0] = 95.0
    assert backoff.pause() == 5.0 and backoff.pause(asked=60) == 5.0
    clock[0] = 100.0
    assert backoff.pause() is None
    backoff.progress()  # something got through: a fresh window, short pauses again
    assert backoff.pause() == 0.25


def test_which_answers_are_passing():
    def status(code: int, retry_after: str | None = None) -> ApiError:
        return refusal(code, b'{"detail": "why"}', "", retry_after)

    assert all(status(code).transient for code in (502, 503, 504, 507))
    assert not any(status(code).transient for code in (400, 401, 403, 404, 409, 413, 422, 429, 500))
    assert "unavailable for now (HTTP 502)" in str(status(502))  # a proxy's answer while the server restarts
    assert broke_off("http://s").transient and unreachable("http://s").transient


def test_the_database_away_is_told_from_a_querys_own_fault():
    refused = exc.OperationalError("SELECT 1", {}, Exception("connection refused"))
    lost = exc.InterfaceError("SELECT 1", {}, Exception("connection already closed"), connection_invalidated=True)
    bug = exc.ProgrammingError("SELEKT 1", {}, Exception("syntax error"))
    duplicate = exc.IntegrityError("INSERT", {}, Exception("duplicate key"))
    pool = exc.TimeoutError("QueuePool limit of size 10 overflow 20 reached")
    for error in (refused, lost, pool, exc.DisconnectionError("gone")):
        assert isinstance(error, AWAY_TYPES) and away(error), error
    for error in (bug, duplicate):
        assert isinstance(error, AWAY_TYPES) and not away(error), error
