"""Each server process keeps its boards and grade sheets up to date in the background, so that no
one's look waits while they are made from every run of the term (issue 52: ~3 s for a board and
1–4 s for a graded kind at 250,000 jobs, more for a page that shows several). A pass just after the
process starts, then every ``warm_seconds``: the runs that ended since are folded in, and what a
changed deadline, roster or rule makes again from every run is made here rather than at the next
look. Every process keeps its own (not one process at a time), each pass in a thread, and reads
only what settled since its last pass: the runs of the last minutes (``store.db.SETTLE``), which a
look folds in for itself, would cost every pass their rows (12,000 at 20 jobs a second)."""

from __future__ import annotations

from sqlalchemy import select

from raiserver.errors import DomainError
from raiserver.grading.grades import grades
from raiserver.grading.kinds import rule_of
from raiserver.grading.leaderboard import BOARDS, best_runs
from raiserver.parts import AppServices
from raiserver.services.loop_service import LoopService
from raiserver.store.tables import Kind

FIRST_PASS_SECONDS = 1.0  # after the process starts: its first pass, before anyone's first look


def warm_pass(svc: AppServices) -> list[str]:
    """Bring every board and every graded kind's sheet up to date in this process, each in a short
    session of its own (no transaction held across the pass; a kind removed meanwhile skipped).
    Returns what it kept."""
    kept = []
    for board in BOARDS:
        with svc.db.session() as db:
            best_runs(db, svc.settings, board, settled_only=True)
        kept.append(f"board {board}")
    with svc.db.session() as db:
        graded = [kind.name for kind in db.scalars(select(Kind).order_by(Kind.name)) if rule_of(kind) is not None]
    for name in graded:
        try:
            with svc.db.session() as db:
                grades(db, svc.settings, name, settled_only=True)
        except DomainError:  # a rule that cannot be used now, a kind just removed: its own page says why
            continue
        kept.append(f"sheet {name}")
    return kept


class Warm(LoopService):
    name = "warm"

    def __init__(self, svc: AppServices) -> None:
        super().__init__(svc, svc.settings.warm_seconds, first_after=FIRST_PASS_SECONDS)

    def run_once(self) -> list[str]:
        return warm_pass(self.svc)
