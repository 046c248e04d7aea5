"""What rai-timed wrote of a timed run (issue 46): read from root's folder after every process of
the job is gone. rai-timed wrote it, not the job: it holds numbers and rai-timed's own words only.
Still read defensively: a line that does not parse is left out, never guessed at."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from raiprotocol.models import OpMeasure

SKETCHES = 8  # rai-timed.c CHECK_SKETCHES
SAMPLES = 16  # rai-timed.c CHECK_SAMPLES


@dataclass
class TimedResult:
    exit_code: int | None = None
    cpu_seconds: float | None = None
    problem: str | None = None
    bound_ms: int | None = None
    cpu_budget_ms: int | None = None  # the run was stopped once its CPU time passed this budget
    ops: list[OpMeasure] = field(default_factory=list)


def _finite(text: str) -> float | None:
    value = float(text)
    return value if math.isfinite(value) else None


def _op(words: list[str]) -> OpMeasure | None:
    """``op I IN OUT NS CPU_USEC CHANGED nonfinite N norm2 X sketch S… samples AT:V… via P|Q`` or ``op I IN OUT unended``."""
    inputs, outputs = int(words[2]), int(words[3])
    via = words[-1] if len(words) > 2 and words[-2] == "via" and words[-1] in ("P", "Q") else None
    if words[4] == "unended":
        return OpMeasure(inputs=inputs, outputs=outputs)
    ns, cpu, changed = int(words[4]), int(words[5]), words[6] == "1"
    rest = words[7:]
    if rest[:1] == ["unreadable"]:
        return OpMeasure(inputs=inputs, outputs=outputs, seconds=ns / 1e9, changed=True, copied_in=None if via is None else via == "Q")
    if rest[0] != "nonfinite" or rest[2] != "norm2" or rest[4] != "sketch" or rest[5 + SKETCHES] != "samples":
        return None
    samples = [s.split(":", 1) for s in rest[6 + SKETCHES : 6 + SKETCHES + SAMPLES]]
    return OpMeasure(
        inputs=inputs,
        outputs=outputs,
        seconds=ns / 1e9,
        cpu_seconds=cpu / 1e6 if cpu >= 0 else None,
        changed=changed,
        nonfinite=int(rest[1]),
        norm2=_finite(rest[3]),
        sketch=[_finite(v) for v in rest[5 : 5 + SKETCHES]],
        sample_at=[int(at) for at, _ in samples],
        sample_values=[_finite(v) for _, v in samples],
        copied_in=None if via is None else via == "Q",
    )


def parse(text: str) -> TimedResult:
    out = TimedResult()
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        try:
            if key == "exit":
                out.exit_code = int(value)
            elif key == "cpu_usec":
                usec = int(value)
                out.cpu_seconds = usec / 1e6 if usec >= 0 else None
            elif key == "bound":
                out.bound_ms = int(value)
            elif key == "cpu_budget":
                out.cpu_budget_ms = int(value)
            elif key == "problem":
                out.problem = value[:300]
            elif key == "op" and len(out.ops) < 256:
                op = _op(line.split())
                if op is not None:
                    out.ops.append(op)
        except (ValueError, IndexError):
            continue
    return out
