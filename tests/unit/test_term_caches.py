"""The boards and grade sheets a server process keeps (issue 52) say what they would say made from
every run: after runs end, after a late submission draws late days (an earlier late run then counts)
and after an extension is granted, for those students alone or for everyone."""

from __future__ import annotations

from datetime import timedelta

from helpers.rows import add_job, add_user

from raiprotocol.models import JobState
from raiserver.config import Settings
from raiserver.grading import grades as sheets
from raiserver.grading import leaderboard as boards
from raiserver.store.db import utcnow
from raiserver.store.tables import Extension, Kind

DUE = utcnow() - timedelta(days=3)


def ended(db, owner, created, op_time, ago=timedelta(days=1), state=JobState.succeeded):
    job = add_job(db, owner, kind="m4")
    job.created_at, job.state = created, state
    if state.finished:
        job.finished_at = utcnow() - ago
        job.results = {"op_time_total": op_time, "correctness": {"model": 0.95}}
    db.commit()
    return job


def looks(db, settings):
    """(board, grades) as this process's kept copies say, and as made from every run."""

    def now():
        board = [(key, run.job.id, sorted(names)) for key, run, names in boards.best_runs(db, settings, "unverified")]
        rows = [(r.username, r.grade, r.run.job.id if r.run else None, r.reason) for r in sheets.grades(db, settings, "m4")[1]]
        return board, rows

    kept = now()
    boards._BOARDS.clear()
    sheets._SHEETS.clear()
    made = now()
    return kept, made


def test_kept_boards_and_sheets_follow_runs_late_days_and_extensions(db):
    settings = Settings(late_days=5)
    db.add(Kind(name="m4", due_at=DUE, late_policy="days", late_hours=None, grading={"rule": "linear", "slow": 1.0, "fast": 0.1}))
    db.commit()
    alice, bob, carol = (add_user(db, name) for name in ("alice", "bob", "carol"))
    late = DUE + timedelta(hours=1)
    ended(db, alice, late, 0.2)  # a day late, no late day drawn: counts for nothing yet
    ended(db, bob, late, 0.3)
    ended(db, carol, DUE - timedelta(hours=5), 0.5)
    kept, made = looks(db, settings)
    assert kept == made
    assert [key for key, *_ in made[0]] == ["user:carol"]
    looks(db, settings)  # kept again from every run
    ended(db, carol, DUE - timedelta(hours=4), 0.4, ago=timedelta(0))  # a run that ends now
    queued = add_job(db, alice, kind="m4")  # alice's next late submission draws the day her first run needed
    queued.created_at, queued.late_days = utcnow(), 1
    db.commit()
    kept, made = looks(db, settings)
    assert kept == made
    assert [key for key, *_ in made[0]] == ["user:alice", "user:carol"]
    looks(db, settings)
    db.add(Extension(kind="m4", username="bob", due_at=DUE + timedelta(days=1), reason="ill", granted_by="prof"))
    db.commit()
    kept, made = looks(db, settings)
    assert kept == made
    assert [key for key, *_ in made[0]] == ["user:alice", "user:bob", "user:carol"]
    assert {user: grade > 0 for user, grade, *_ in made[1]} == {"alice": True, "bob": True, "carol": True}
