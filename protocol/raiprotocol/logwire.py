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
from dataclasses import dataclass

END = "end"  # the stream's last entry: the job ended (x: its state); it holds no line

# KEYS[1] the stream; ARGV: count, t, s, x, and optionally the writer's last known line number
# (numbering never goes back below it, even if Redis lost the stream in a restart), the batch's id
# (kept with the entry) and, when the writer sends it again after an error, "again": a batch whose
# id is among the last entries is already there (its first write went through, but Redis went away
# before the writer heard so) and is not written twice. Only a batch sent again looks back, so an
# ordinary append reads one entry, as before. Returns {number of the entry's last line, number of
# the last line Redis still had}.
APPEND_LUA = """
local last = 0
local top = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', ARGV[7] and 8 or 1)
if top[1] then last = tonumber(string.match(top[1][1], '%-(%d+)$')) end
local had = last
if ARGV[7] then
  for _, entry in ipairs(top) do
    local f = entry[2]
    for i = 1, #f, 2 do
      if f[i] == 'b' and f[i + 1] == ARGV[6] then
        return {tonumber(string.match(entry[1], '%-(%d+)$')), had}
      end
    end
  end
end
local floor = tonumber(ARGV[5] or '0')
if last < floor then last = floor end
local n = last + tonumber(ARGV[1])
if ARGV[6] then
  redis.call('XADD', KEYS[1], '0-' .. n, 't', ARGV[2], 's', ARGV[3], 'c', ARGV[1], 'x', ARGV[4], 'b', ARGV[6])
else
  redis.call('XADD', KEYS[1], '0-' .. n, 't', ARGV[2], 's', ARGV[3], 'c', ARGV[1], 'x', ARGV[4])
end
return {n, had}
"""


def _s(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


@dataclass(slots=True)
class Batch:
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

    def to_dict(self) -> dict:
        return {"n": self.n, "t": self.t, "s": self.s, "c": self.c, "x": self.x}

    @classmethod
    def from_dict(cls, d: dict) -> Batch:
        return cls(int(d["n"]), float(d["t"]), str(d["s"]), int(d["c"]), str(d["x"]))


def append_args(stream: str, t: float, texts: list[str] | str, count: int | None = None) -> list:
    """ARGV for APPEND_LUA: ``texts`` as a list of lines, or already joined with ``count``."""
    if isinstance(texts, str):
        return [count if count is not None else texts.count("\n") + 1, f"{t:.6f}", stream, texts]
    return [len(texts), f"{t:.6f}", stream, "\n".join(texts)]


def decode_entry(entry_id: bytes | str, fields: dict) -> Batch:
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
