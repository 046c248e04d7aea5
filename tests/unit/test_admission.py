"""People's requests are admitted a few at a time, callers in turn, and wait holding nothing
(raiserver.access.admission); the workers' calls and /healthz never wait."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from raiserver.access.admission import Admission, FairTurns

TOKEN = "admission-worker-token"


def _scope(path: str = "/api/v1/jobs", auth: bytes = b"", client: str = "10.0.0.1") -> dict[str, Any]:
    headers = [(b"authorization", auth)] if auth else []
    return {"type": "http", "path": path, "headers": headers, "client": (client, 1)}


class App:
    """An app whose requests stay inside until ``open`` is set; counts how many are inside at once."""

    def __init__(self) -> None:
        self.inside = self.most = 0
        self.open = asyncio.Event()
        self.entered: list[str] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.inside += 1
        self.most = max(self.most, self.inside)
        self.entered.append(scope["client"][0])
        try:
            await self.open.wait()
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b""})
        finally:
            self.inside -= 1


async def _nothing() -> dict[str, Any]:
    return {"type": "http.request", "body": b"", "more_body": False}


async def _sent(message: dict[str, Any]) -> None:
    return None


def test_at_most_at_once_are_inside_and_the_rest_wait_outside() -> None:
    async def main() -> tuple[int, int]:
        app = App()
        mw = Admission(app, TOKEN, at_once=3, per_caller=100)
        calls = [asyncio.create_task(mw(_scope(client=f"10.0.0.{i}"), _nothing, _sent)) for i in range(10)]
        await asyncio.sleep(0.1)
        inside = app.inside
        app.open.set()
        await asyncio.gather(*calls)
        return inside, app.most

    inside, most = asyncio.run(main())
    assert inside == 3 and most == 3, (inside, most)


def test_a_workers_call_and_healthz_go_in_while_peoples_turns_are_all_taken() -> None:
    async def main() -> list[str]:
        app = App()
        mw = Admission(app, TOKEN, at_once=1, per_caller=1)
        people = [asyncio.create_task(mw(_scope(client=f"10.0.1.{i}"), _nothing, _sent)) for i in range(3)]
        await asyncio.sleep(0.05)
        worker = asyncio.create_task(mw(_scope(auth=f"Bearer {TOKEN}".encode(), client="worker"), _nothing, _sent))
        health = asyncio.create_task(mw(_scope("/healthz", client="probe"), _nothing, _sent))
        forged = asyncio.create_task(mw(_scope(auth=f"Bearer {TOKEN}x".encode(), client="forger"), _nothing, _sent))
        await asyncio.sleep(0.05)
        seen = list(app.entered)
        app.open.set()
        await asyncio.gather(*people, worker, health, forged)
        return seen

    seen = asyncio.run(main())
    assert "worker" in seen and "probe" in seen, seen
    assert "forger" not in seen, "a wrong token was let past the students' line"
    assert sum(s.startswith("10.0.1.") for s in seen) == 1


def _place_of_the_late_one(flood: list[dict[str, Any]], late: dict[str, Any], at_once: int, per_caller: int) -> int:
    """The requests ``flood`` wait, then ``late`` comes: at which place (from 0) it went in."""

    async def main() -> int:
        order: list[str] = []
        gate = asyncio.Event()

        async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
            order.append(scope["client"][0])
            await gate.wait()

        mw = Admission(app, TOKEN, at_once=at_once, per_caller=per_caller)
        early = [asyncio.create_task(mw(scope, _nothing, _sent)) for scope in flood]
        await asyncio.sleep(0.05)
        last = asyncio.create_task(mw(late, _nothing, _sent))
        await asyncio.sleep(0.05)
        gate.set()
        await asyncio.gather(*early, last)
        return order.index(late["client"][0])

    return asyncio.run(main())


def test_one_callers_flood_does_not_go_before_another_callers_request() -> None:
    """One student sends 50 requests, then another sends one: the second is in as soon as a turn
    frees, not after the 50."""
    place = _place_of_the_late_one([_scope(client="flooder") for _ in range(50)], _scope(client="other"), 2, 2)
    assert place <= 3  # two in before it came, at most one more while turns went round


def test_a_slow_upload_and_a_live_stream_hold_no_turn() -> None:
    """The body arriving slowly, and the answer streaming: another request goes in meanwhile."""

    async def main() -> tuple[bool, bool]:
        body_arrives, stream_ends = asyncio.Event(), asyncio.Event()
        entered: list[str] = []

        async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
            entered.append(scope["path"])
            if scope["path"] == "/upload":
                await receive()
            await send({"type": "http.response.start", "status": 200, "headers": []})
            if scope["path"] == "/stream":
                await stream_ends.wait()
            await send({"type": "http.response.body", "body": b""})

        async def slow_body() -> dict[str, Any]:
            await body_arrives.wait()
            return {"type": "http.request", "body": b"x", "more_body": False}

        mw = Admission(app, TOKEN, at_once=1, per_caller=1)
        upload = asyncio.create_task(mw(_scope("/upload", client="a"), slow_body, _sent))
        await asyncio.sleep(0.05)
        other = asyncio.create_task(mw(_scope("/other", client="b"), _nothing, _sent))
        await asyncio.wait_for(other, 2)
        while_uploading = "/other" in entered
        body_arrives.set()
        await upload
        stream = asyncio.create_task(mw(_scope("/stream", client="c"), _nothing, _sent))
        await asyncio.sleep(0.05)
        after = asyncio.create_task(mw(_scope("/after", client="d"), _nothing, _sent))
        await asyncio.wait_for(after, 2)
        stream_ends.set()
        await stream
        return while_uploading, "/after" in entered

    assert asyncio.run(main()) == (True, True)


def test_turns_given_back_however_the_request_ends() -> None:
    """Errors and cancelled waits return every turn: 20 failing and 20 cancelled requests later,
    all turns are free and the next request goes straight in."""

    async def main() -> tuple[int, dict[str, int]]:
        async def failing(scope: dict[str, Any], receive: Any, send: Any) -> None:
            await asyncio.sleep(0.01)
            raise RuntimeError("boom")

        mw = Admission(failing, TOKEN, at_once=2, per_caller=2)
        for _ in range(20):
            with pytest.raises(RuntimeError):
                await mw(_scope(client="x"), _nothing, _sent)
        waiting = [asyncio.create_task(mw(_scope(client=f"c{i}"), _nothing, _sent)) for i in range(20)]
        await asyncio.sleep(0)
        for t in waiting:
            t.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)
        return mw.turns.free, mw.turns.busy

    free, busy = asyncio.run(main())
    assert free == 2 and busy == {}


def test_fair_turns_round_robin_and_cap() -> None:
    async def main() -> list[str]:
        turns = FairTurns(1, per_caller=1)
        got: list[str] = []
        await turns.take(("10.0.0.1", "a"))  # a holds the one turn

        async def want(address: str, key: str) -> None:
            await turns.take((address, key))
            got.append(key)

        tasks = [asyncio.create_task(want(f"10.0.0.{n}", k)) for n, k in [(1, "a"), (1, "a"), (1, "a"), (2, "b"), (3, "c")]]
        await asyncio.sleep(0)
        turns.give(("10.0.0.1", "a"))
        for _ in range(5):
            await asyncio.sleep(0.01)
            turns.give(("10.0.0." + {"a": "1", "b": "2", "c": "3"}[got[-1]], got[-1]))
        await asyncio.gather(*tasks)
        return got

    assert asyncio.run(main()) == ["a", "b", "c", "a", "a"]


def test_made_up_keys_from_one_address_share_its_turns() -> None:
    """The hostile review: 200 requests, each with an invented key, then one student's request from
    another address. Keyed by the key alone the student went in 200th of 201; now at the next turn."""
    sybils = [_scope(auth=f"Basic key{i}".encode(), client="6.6.6.6") for i in range(200)]
    place = _place_of_the_late_one(sybils, _scope(auth=b"Basic student", client="10.1.1.1"), 8, 4)
    assert place <= 9  # 8 were in before it came; the next turn is its


def test_a_body_in_pieces_with_a_late_one_is_computed_within_the_limit() -> None:
    """The hostile review: a body whose second of three pieces came late gave its turn back and
    never took it again, so the work after the body ran outside the limit (12 at once for 2)."""

    async def main() -> int:
        inside = most = 0

        async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
            nonlocal inside, most
            while (await receive()).get("more_body"):
                pass
            inside += 1
            most = max(most, inside)
            await asyncio.sleep(0.2)  # the work on the whole upload
            inside -= 1
            await send({"type": "http.response.start", "status": 201, "headers": []})

        def pieces() -> Any:
            n = 0

            async def receive() -> dict[str, Any]:
                nonlocal n
                n += 1
                if n == 2:
                    await asyncio.sleep(0.1)  # longer than BODY_GRACE: the turn goes back meanwhile
                return {"type": "http.request", "body": b"x", "more_body": n < 3}

            return receive

        mw = Admission(app, TOKEN, at_once=2, per_caller=100)
        await asyncio.gather(*(mw(_scope(client=f"10.0.2.{i}"), pieces(), _sent) for i in range(20)))
        return most

    assert asyncio.run(main()) == 2


def test_a_body_read_after_a_disconnect_check_is_whole() -> None:
    """Starlette's Request.is_disconnected() cancels a receive(): the piece it was getting is the
    next receive()'s, not lost (the review: the app read 'TAIL' of 'HEAD-TAIL')."""
    from starlette.requests import Request

    async def main() -> bytes:
        line: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        for piece in (b"HEAD-", b"TAIL"):
            line.put_nowait({"type": "http.request", "body": piece, "more_body": piece == b"HEAD-"})
        got: list[bytes] = []

        async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
            request = Request(scope, receive)
            await request.is_disconnected()
            got.append(await request.body())

        async def receive() -> dict[str, Any]:
            return await line.get()

        mw = Admission(app, TOKEN)
        await mw({**_scope(), "method": "POST", "query_string": b""}, receive, _sent)
        return got[0]

    assert asyncio.run(main()) == b"HEAD-TAIL"


def test_a_full_line_and_a_long_wait_are_answered_busy_at_once() -> None:
    """The line is bounded (per process and per address) and so is a wait: past either the answer
    is 503 with Retry-After, and nothing of the request ran."""

    async def main() -> tuple[list[int], list[int], int]:
        gate = asyncio.Event()
        ran: list[str] = []

        async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
            ran.append(scope["client"][0])
            await gate.wait()
            await send({"type": "http.response.start", "status": 200, "headers": []})

        async def call(mw: Admission, client: str) -> int:
            statuses: list[int] = []

            async def send(message: dict[str, Any]) -> None:
                if message["type"] == "http.response.start":
                    statuses.append(message["status"])
                    assert message["status"] != 503 or (b"retry-after", b"5") in message["headers"]

            await mw(_scope(client=client), _nothing, send)
            return statuses[0]

        full = Admission(app, TOKEN, at_once=1, per_caller=1, line=8)
        first = asyncio.create_task(call(full, "10.0.3.1"))
        await asyncio.sleep(0.01)
        same = [asyncio.create_task(call(full, "10.0.3.2")) for _ in range(4)]  # a quarter of the line from one address
        others = [asyncio.create_task(call(full, f"10.0.4.{i}")) for i in range(6)]
        await asyncio.sleep(0.01)
        others.append(asyncio.create_task(call(full, "10.0.6.1")))  # the ninth to wait: the line is full
        await asyncio.sleep(0.05)
        gate.set()
        line = await asyncio.gather(first, *same, *others)
        gate.clear()
        slow = Admission(app, TOKEN, at_once=1, per_caller=1, wait_seconds=0.2)
        holder = asyncio.create_task(call(slow, "10.0.5.1"))
        await asyncio.sleep(0.01)
        waited = await call(slow, "10.0.5.2")
        gate.set()
        await holder
        return list(line[:5]), list(line[5:]), waited

    by_one, by_others, waited = asyncio.run(main())
    assert by_one == [200, 200, 200, 503, 503], by_one  # two of its own wait (8 // 4), the third is refused
    assert by_others == [200] * 6 + [503], by_others
    assert waited == 503
