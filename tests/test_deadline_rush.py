"""bench/deadline_rush.py in its reduced form (``--tiny``, under a minute), so that the bench that
measures issue 49's waits cannot rot (issue 52: it had, on a test helper that moved): a real
service as `raid dev` runs it, a history, a small rush; each job's range shown at submit and its
real wait are recorded and the figures printed. The full run's figures are in
bench/deadline-rush-eta.txt; eight jobs are too few to hold them to the 90 % here."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from deadline_rush import main  # noqa: E402

pytestmark = [pytest.mark.timeout(120), pytest.mark.alone]


def test_the_deadline_rush_bench_runs_and_measures_the_waits_shown(capsys):
    out = main(["--tiny"])
    printed = capsys.readouterr().out
    assert set(out["states"]) == {"succeeded"}, out["states"]
    figures = out["rush_figures"]
    assert figures["jobs"] == out["rush"]["students"] + out["rush"]["students"] // 4  # every rush job, each one's range and wait
    assert figures["coverage"] is not None and figures["median_ratio"] is not None, figures
    assert out["history_figures"]["guesses"] >= 1  # a cold service says its ranges are guesses
    assert out["fair_share_excess"] <= 0
    assert "coverage:" in printed and "upper end / wait" in printed, printed
