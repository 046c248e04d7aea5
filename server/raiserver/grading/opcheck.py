"""Whether a timed run's outputs are the operation's (issue 46): rai-timed fingerprinted each
operation's outputs at its end mark and, once the job was gone, summed them under a key the job
never saw; the course's reference did the same on the same inputs. Here the two are compared.

Each random-sign sum of the difference between two outputs has the squared L2 norm of that
difference as its expected square, so the sums' root mean square estimates how far the student's
outputs are from the reference's (8 sums: within a factor of ~2 with high probability); the values
at random places are compared one by one, relative to the outputs' RMS. A partial result, an
answer computed in lower precision or on other inputs is far outside any course's tolerance; fp32
sums in another order are ~1e-6 away.
"""

from __future__ import annotations

import math

from raiprotocol.models import OpMeasure


class Mismatch(Exception):
    """Why the outputs are not the operation's; the message is for the student."""


def _sizes(i: int, got: OpMeasure, want: OpMeasure) -> None:
    if (got.inputs, got.outputs) != (want.inputs, want.outputs):
        raise Mismatch(
            f"operation {i} has {got.inputs} inputs and {got.outputs} outputs; the course's has {want.inputs} and {want.outputs}"
        )


def relative_error(got: OpMeasure, want: OpMeasure) -> float:
    """How far ``got``'s outputs are from ``want``'s: the larger of the estimated relative L2 norm of
    the difference and the largest sampled difference relative to the outputs' RMS (inf: unknown)."""
    if want.norm2 is None or got.norm2 is None or len(got.sketch) != len(want.sketch) or not want.sketch:
        return math.inf
    if any(v is None for v in got.sketch) or any(v is None for v in want.sketch):
        return math.inf
    scale = math.sqrt(want.norm2) or 1e-30
    l2 = math.sqrt(
        sum((a - b) ** 2 for a, b in zip(got.sketch, want.sketch, strict=True) if a is not None and b is not None) / len(want.sketch)
    )
    worst = l2 / scale
    rms = scale / math.sqrt(max(1, want.outputs))
    if got.sample_at != want.sample_at:
        return math.inf
    for a, b in zip(got.sample_values, want.sample_values, strict=True):
        if a is None or b is None:
            return math.inf
        worst = max(worst, abs(a - b) / (abs(b) + rms))
    return worst


def compare(ops: list[OpMeasure], reference: list[OpMeasure], rtol: float) -> float:
    """The largest relative error over the operations; Mismatch when any is not the operation's."""
    if len(ops) != len(reference):
        raise Mismatch(f"it timed {len(ops)} operation{'s' * (len(ops) != 1)}; the course's reference times {len(reference)}")
    worst = 0.0
    for i, (got, want) in enumerate(zip(ops, reference, strict=True), 1):
        _sizes(i, got, want)
        if got.seconds is None:
            raise Mismatch(f"operation {i} never reached its end mark")
        if got.changed:
            raise Mismatch(f"the outputs of operation {i} changed after its end mark: work went on after the clock stopped")
        if got.nonfinite > want.nonfinite:
            raise Mismatch(f"operation {i} has {got.nonfinite} outputs that are not finite numbers")
        error = relative_error(got, want)
        if not error <= rtol:
            said = f"{error:.2g}" if math.isfinite(error) else "an unknown amount"
            raise Mismatch(
                f"the outputs of operation {i} differ from the course's reference by {said} (relative; the course allows {rtol:g})"
            )
        worst = max(worst, error)
    return worst
