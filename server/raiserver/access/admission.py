"""Admission of people's requests: a server process computes at most ``at_once`` of them at a time,
each caller's in turn, and a request waits for its turn holding nothing.

A server process short of CPU shares it, and Python's lock, between every thread that wants it: with
forty students' requests in anyio's threads, a worker's claim or end report in the queue's own lane
(``store/lane.py``) got a fortieth of the process, a 2 s job held its slot 5 s in the database's
eyes, and at 0.4 of a core and 5 submissions a second the line before release reached 115 s
(bench/fleet-sim.txt, 2026-11-29). Admitting a few at a time leaves the rest of the process to what
drains the queue; waiting here, on the event loop, costs no thread and no connection (a request that
waited for a thread once held a connection an earlier step of it took: f9aeb4f, reverted).

- **Who waits.** Everything but the workers' calls (the worker token, compared in constant time)
  and ``/healthz``. A turn lasts while the request computes: it is given back while the request
  waits for its body longer than ``BODY_GRACE`` (a student's upload on bad Wi-Fi holds none; it is
  in line again once the body is in, not after each chunk) and for good when its answer
  starts (a live stream holds none while it streams).
- **Whose turn.** Turns go round the addresses that wait, and within an address round the callers
  (their key, else their session cookie): one student's thousand requests wait behind their own,
  and a thousand made-up keys from one address share that address's turn (the hostile review: keyed
  by the key alone, 200 invented keys put a student 200th of 201). A caller has at most
  ``per_caller`` turns at once.
- **How long.** A request waits at most ``wait_seconds``, and at most ``line`` wait per process
  (``line // 4`` per address); past either it is answered 503 with Retry-After, before any work.
  A client gone after a minute's wait is not served (the CLI's own patience is shorter)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from collections import OrderedDict, deque

from starlette.types import ASGIApp, Message, Receive, Scope, Send

AT_ONCE = 8  # at 0.4 of a core and 5 submissions a second, 4-8 kept the line away where 20-40 did not
PER_CALLER = 4  # a page and its stream, a CLI's submit and its status: well within
BODY_GRACE = 0.05  # a request whose body is this late gives its turn back while it comes (in line again after)
WAIT_SECONDS = 60.0
LINE = 2000  # waiting requests per process (an address: a quarter of it)

Caller = tuple[str, str]  # (address, key)


class Busy(Exception):
    """No turn for this request: the line is full, or it waited its longest."""


class FairTurns:
    """At most ``slots`` turns out at once, at most ``per_caller`` to one caller; a freed turn goes
    round the waiting addresses, and within an address round its callers."""

    def __init__(self, slots: int, per_caller: int, line: int = LINE, wait_seconds: float = WAIT_SECONDS) -> None:
        self.free, self.per_caller, self.line, self.wait_seconds = slots, per_caller, line, wait_seconds
        self.busy: dict[Caller, int] = {}
        self.waiting: OrderedDict[str, OrderedDict[str, deque[asyncio.Future[None]]]] = OrderedDict()
        self.queued = 0
        self.queued_at: dict[str, int] = {}

    async def take(self, caller: Caller, bounded: bool = True) -> None:
        """A turn, or Busy (``bounded``: a request that had one, back in line after its body, waits
        as long as it takes)."""
        address, key = caller
        if bounded and (self.queued >= self.line or self.queued_at.get(address, 0) >= max(self.line // 4, 1)):
            raise Busy("too many requests wait")
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting.setdefault(address, OrderedDict()).setdefault(key, deque()).append(turn)
        self.queued += 1
        self.queued_at[address] = self.queued_at.get(address, 0) + 1
        self._hand_out()
        try:
            await asyncio.wait_for(asyncio.shield(turn), self.wait_seconds if bounded else None)
        except (asyncio.CancelledError, asyncio.TimeoutError) as exc:
            if turn.done() and not turn.cancelled():  # given, then cancelled or timed out before it was used
                self.give(caller)
            else:
                turn.cancel()
                self._forget(caller, turn)
            if isinstance(exc, asyncio.TimeoutError):
                raise Busy("waited its longest") from None
            raise

    def give(self, caller: Caller) -> None:
        self.free += 1
        left = self.busy.pop(caller) - 1
        if left:
            self.busy[caller] = left
        self._hand_out()

    def _dequeued(self, address: str) -> None:
        self.queued -= 1
        left = self.queued_at.pop(address) - 1
        if left:
            self.queued_at[address] = left

    def _forget(self, caller: Caller, turn: asyncio.Future[None]) -> None:
        address, key = caller
        keys = self.waiting.get(address)
        line = keys.get(key) if keys is not None else None
        if keys is None or line is None or turn not in line:
            return
        line.remove(turn)
        self._dequeued(address)
        if not line:
            del keys[key]
            if not keys:
                del self.waiting[address]

    def _next(self) -> Caller | None:
        for address, keys in self.waiting.items():
            for key in keys:
                if self.busy.get((address, key), 0) < self.per_caller:
                    return address, key
        return None

    def _hand_out(self) -> None:
        while self.free > 0:
            caller = self._next()
            if caller is None:
                return
            address, key = caller
            keys = self.waiting[address]
            line = keys[key]
            turn = line.popleft()
            self._dequeued(address)
            if line:
                keys.move_to_end(key)  # the address's other callers go first next time
            else:
                del keys[key]
            if keys:
                self.waiting.move_to_end(address)  # and the other addresses
            else:
                del self.waiting[address]
            if turn.cancelled():
                continue
            self.free -= 1
            self.busy[caller] = self.busy.get(caller, 0) + 1
            turn.set_result(None)


class _Turn:
    """One request's turn: taken, given back while it waits on its client, given up at its answer."""

    def __init__(self, turns: FairTurns, caller: Caller) -> None:
        self.turns, self.caller = turns, caller
        self.held = self.over = False

    async def take(self, bounded: bool = True) -> None:
        if self.held or self.over:
            return
        await self.turns.take(self.caller, bounded)
        if self.held or self.over:  # another task of the request took it meanwhile, or the answer began
            self.turns.give(self.caller)
            return
        self.held = True

    def give(self) -> None:
        if self.held:
            self.held = False
            self.turns.give(self.caller)

    def end(self) -> None:
        self.over = True
        self.give()


class Admission:
    """The pure ASGI middleware that admits people's requests (see the module's docstring)."""

    def __init__(
        self,
        app: ASGIApp,
        worker_token: str,
        at_once: int = AT_ONCE,
        per_caller: int = PER_CALLER,
        line: int = LINE,
        wait_seconds: float = WAIT_SECONDS,
    ) -> None:
        self.app = app
        self.worker = f"bearer {worker_token}".encode() if worker_token else None
        self.turns = FairTurns(at_once, per_caller, line, wait_seconds)

    def is_worker(self, scope: Scope) -> bool:
        if self.worker is None:
            return False
        value = _header(scope, b"authorization")
        scheme, _, credentials = value.partition(b" ")
        return hmac.compare_digest(scheme.lower() + b" " + credentials.strip(), self.worker)

    @staticmethod
    def caller(scope: Scope) -> Caller:
        """Whose request: its address (as the connection guard resolved it) and, unverified, its
        key or session (a made-up one shares its address's turns)."""
        client = scope.get("client")
        address = client[0] if client else "?"
        key = _header(scope, b"authorization")
        if key:
            return address, "k" + hashlib.blake2b(key, digest_size=12).hexdigest()
        for part in _header(scope, b"cookie").split(b";"):
            name, _, value = part.strip().partition(b"=")
            if name == b"rai_session" and value:
                return address, "s" + hashlib.blake2b(value, digest_size=12).hexdigest()
        return address, ""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") == "/healthz" or self.is_worker(scope):
            await self.app(scope, receive, send)
            return
        turn = _Turn(self.turns, self.caller(scope))

        stash: list[Message] = []  # a message that came as its receive() was cancelled: the next call's

        async def receive_body() -> Message:
            if stash:
                message = stash.pop()
            elif turn.over:  # the answer began: no turns any more (a stream's disconnect listener)
                return await receive()
            else:
                arriving = asyncio.ensure_future(receive())
                try:
                    if turn.held:
                        done, _ = await asyncio.wait({arriving}, timeout=BODY_GRACE)
                        if not done:
                            turn.give()  # the client's bytes take long: nobody waits for them
                    message = await arriving
                except BaseException:
                    if arriving.done() and not arriving.cancelled() and arriving.exception() is None:
                        stash.append(arriving.result())  # Request.is_disconnected() cancels its receive(): no byte is lost
                    else:
                        arriving.cancel()  # as if the app's own receive() was cancelled
                    raise
            if not message.get("more_body"):  # all of it came: in line again if the turn was given meanwhile
                await turn.take(bounded=False)
            return message

        async def send_answer(message: Message) -> None:
            if message["type"] == "http.response.start":
                turn.end()
            await send(message)

        try:
            await turn.take()
        except Busy as exc:
            await _busy(send, str(exc))
            return
        try:
            await self.app(scope, receive_body, send_answer)
        finally:
            turn.end()


async def _busy(send: Send, why: str) -> None:
    body = f'{{"detail": "the server is busy ({why}); try again in a few seconds"}}'.encode()
    headers = [(b"content-type", b"application/json"), (b"retry-after", b"5"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _header(scope: Scope, name: bytes) -> bytes:
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value)
    return b""
