"""Between jobs a slot's stamp says its worker lives (raiworker.lease.IdleStamp), checked with the
very test the containers' watchers run (PAST_BOOT_SH): renewed while the worker lives, left to
lapse when it stops, never renewed past a claim (the job's lease alone decides its stamp)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from raiworker.lease import PAST_BOOT_SH, IdleStamp


def past(stamp: Path) -> bool:
    """What a spare container's keepalive decides: exit (True) or keep waiting."""
    return subprocess.run(["sh", "-c", f"STAMP={stamp}; {PAST_BOOT_SH}"]).returncode == 0


def test_renewed_while_idle_and_left_to_lapse_once_paused(tmp_path: Path) -> None:
    stamp = tmp_path / "lease" / "until"
    idle = IdleStamp(stamp, dead_after=2, every=0.2)
    assert not past(stamp)  # no stamp (a worker of before): not past
    idle.resume()
    first = stamp.read_text()
    time.sleep(3.2)  # past the first stamp's time: renewals kept it ahead
    assert not past(stamp) and stamp.read_text() != first
    idle.pause()  # a claim: the job's lease writes its own from here
    held = stamp.read_text()
    time.sleep(0.6)
    assert stamp.read_text() == held, "an idle stamp was written after the pause"
    time.sleep(2.6)
    assert past(stamp), "a paused (or dead) worker's stamp did not lapse"
    idle.resume()  # the job is over: alive again
    assert not past(stamp)
    idle.pause()
