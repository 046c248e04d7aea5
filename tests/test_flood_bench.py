"""bench/flood.py in its reduced form (``--tiny``): one student's 60 requests at once, over and over,
while another student works, so that the bench that measures admission and the stream cap cannot
rot. The full run's figures are in bench/flood.txt."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from flood import main  # noqa: E402

pytestmark = [pytest.mark.timeout(180), pytest.mark.alone]


def test_the_flood_bench_runs_and_the_other_student_is_always_answered(capsys):
    out = main(["--tiny"])
    printed = capsys.readouterr().out
    for flood in ("list", "download"):
        assert out[flood]["victim_failed"] == 0, out[flood]  # every request of the other student's answered 200
        assert out[flood]["victim"]["list"]["n"] > 0, out[flood]
    assert out["list"]["flooder"].get("200", 0) > 0, out["list"]  # the flooder's requests are computed, in turn
    assert out["download"]["flooder"].get("429", 0) > 0, out["download"]  # past 10 downloads at once: refused, not held
    assert "the victim's list p50" in printed and "download flood" in printed, printed
