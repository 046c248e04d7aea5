"""How a job's log travels: in batches of lines, from the worker's Redis Stream to the server's
SSE feed, the stored log file and the client.

A batch is consecutive lines of one stream (stdout, stderr, rai's own ``sys`` lines) read at one
time: ``n`` is the number of its first line (lines are numbered from 1 across the whole log),
``c`` how many lines it holds, ``t`` when they were read, ``x`` the lines joined by ``\\n``.
Batching is what lets a 2-million-line job through: one Redis entry, one JSON object and one
write per batch, not per line.

In Redis a batch is a stream entry whose id is ``0-L``, L the number of its *last* line, so
``XREAD``/``XRANGE`` after ``0-K`` find every batch holding a line after K. Ids are given by
``APPEND_LUA`` inside Redis (atomic whoever writes: worker, retried worker or server), which works
on Redis 6.2 as on 7 (Redis 7's ``0-*`` ids do not exist on 6.2).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NamedTuple

END = "end"  # the stream's last entry: the job ended (x: its state); it holds no line

# One append of a batch, atomic in Redis whoever writes (worker, retried worker, server). Its
# arguments are built in one place, ``append_call``; read them there. Returns {number of the
# entry's last line, number of the last line Redis still had}, or {-1, 0} when the job's fence is
# missing (Redis lost it: the writer keeps the batch and tries again once the server has put the
# fence back) and {-2, 0} when another attempt owns the job or it ended (the writer's run is
# superseded: nothing of it may be stored any more).
APPEND_LUA = """
if ARGV[8] ~= '' then
  local fence = redis.call('GET', KEYS[2])
  if not fence then return {-1, 0} end
  if fence ~= ARGV[8] then return {-2, 0} end
end
local again = ARGV[7] ~= ''
local last = 0
local top = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', again and 8 or 1)
if top[1] then last = tonumber(string.match(top[1][1], '%-(%d+)$')) end
local had = last
if again then
  for _, entry in ipairs(top) do
    local f = entry[2]
    for i = 1, #f, 2 do
      if f[i] == 'b' and f[i + 1] == ARGV[6] then
        return {tonumber(string.match(entry[1], '%-(%d+)$')), had}
      end
    end
  end
end
local floor = tonumber(ARGV[5])
if last < floor then last = floor end
local n = last + tonumber(ARGV[1])
if ARGV[6] ~= '' then
  redis.call('XADD', KEYS[1], '0-' .. n, 't', ARGV[2], 's', ARGV[3], 'c', ARGV[1], 'x', ARGV[4], 'b', ARGV[6])
else
  redis.call('XADD', KEYS[1], '0-' .. n, 't', ARGV[2], 's', ARGV[3], 'c', ARGV[1], 'x', ARGV[4])
end
return {n, had}
"""

FENCE_MISSING = -1  # APPEND_LUA's and RENEW_LUA's answer: Redis lost the fence (a flush, a wiped Redis)
SUPERSEDED = -2  # APPEND_LUA's answer: another attempt owns the job, or it ended

# Raise the job's fence (``keys.fence_key``) to ARGV[1], an attempt number or "end", never lower
# it: the server sets it on every change of attempt and at the end, and puts it back after Redis
# lost it, from the database, without racing a newer value. ARGV[2]: its time to live in seconds.
FENCE_LUA = """
local cur = redis.call('GET', KEYS[1])
if cur == 'end' then return cur end
if cur and ARGV[1] ~= 'end' and tonumber(cur) >= tonumber(ARGV[1]) then return cur end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
return ARGV[1]
"""

# A run renews its lease through Redis: KEYS fence, lease; ARGV attempt, lease time to live in
# milliseconds. Returns 1 renewed, 0 superseded (another attempt owns the job, or it ended),
# -1 the fence is missing (the server puts it back; the run's HTTP renewals decide meanwhile).
RENEW_LUA = """
local fence = redis.call('GET', KEYS[1])
if not fence then return -1 end
if fence ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
return 1
"""


def _s(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


class Batch(NamedTuple):
    n: int  # number of the first line
    t: float
    s: str  # "out" | "err" | "sys" | END
    c: int
    x: str

    @property
    def last(self) -> int:
        return self.n + self.c - 1

    def lines(self) -> list[str]:
        return self.x.split("\n") if self.c else []

    def after(self, position: int) -> Batch | None:
        """The part of this batch after line ``position`` (for exact resumption), or None."""
        if self.last <= position:
            return None
        if self.n > position:
            return self
        skip = position - self.n + 1
        return Batch(position + 1, self.t, self.s, self.c - skip, "\n".join(self.lines()[skip:]))

    def to_dict(self) -> dict[str, Any]:
        return {"n": self.n, "t": self.t, "s": self.s, "c": self.c, "x": self.x}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Batch:
        return cls(int(d["n"]), float(d["t"]), str(d["s"]), int(d["c"]), str(d["x"]))


def append_call(
    job_stream: str,
    stream: str,
    t: float,
    text: str,
    count: int,
    *,
    floor: int = 0,
    batch_id: str = "",
    again: bool = False,
    fence: tuple[str, int] | None = None,
) -> tuple[list[str], list[str | int]]:
    """KEYS and ARGV for APPEND_LUA, by name: ``job_stream`` the Redis key, ``stream`` out/err/sys
    or END, ``text`` the ``count`` lines joined by ``\\n``; ``floor`` the writer's last known line
    number (numbering never goes back below it, even if Redis lost the stream); ``batch_id`` kept
    with the entry, so that a batch sent ``again`` after an error whose first write went through
    is not stored twice (only then does the script look back over the last entries); ``fence``
    (key, attempt): refused unless that attempt owns the job."""
    keys = [job_stream, fence[0] if fence else job_stream]
    args: list[str | int] = [count, f"{t:.6f}", stream, text, floor, batch_id, "1" if again else "", str(fence[1]) if fence else ""]
    return keys, args


def decode_entry(entry_id: bytes | str, fields: Mapping[bytes | str, bytes | str]) -> Batch:
    last = int(_s(entry_id).split("-", 1)[1])
    f = {_s(k): _s(v) for k, v in fields.items()}
    c = int(f.get("c", 1))
    return Batch(last - c + 1, float(f.get("t", 0)), f.get("s", "out"), c, f.get("x", ""))


def dumps(batches: list[Batch]) -> str:
    """An SSE ``lines`` event's data. ASCII only: an SSE data field breaks at any Unicode line
    break (U+2028, NEL…), which job output may hold."""
    return json.dumps([b.to_dict() for b in batches], ensure_ascii=True)


def loads(data: str) -> list[Batch]:
    return [Batch.from_dict(d) for d in json.loads(data)]


_LOST = " of this log were lost when Redis restarted"


def lost_note(first: int, last: int) -> str:
    """rai's line where a writer found that Redis lost lines it had stored (a restart without its
    data, a flush); the stored log says instead that they were restored, where they were."""
    return f"lines {first}–{last}{_LOST}"


def lost_range(text: str) -> tuple[int, int] | None:
    """The lines a ``lost_note`` names, or None for any other line."""
    if not text.startswith("lines ") or not text.endswith(_LOST):
        return None
    first, sep, last = text[len("lines ") : -len(_LOST)].partition("–")
    return (int(first), int(last)) if sep and first.isdigit() and last.isdigit() else None


def restored_note(first: int, last: int) -> str:
    return f"lines {first}–{last}{_LOST}; restored from the worker's copy"
