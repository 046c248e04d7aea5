"""Boards and grade sheets are made from every run of the term by one thread of a process at a
time, and by the background pass rather than at someone's look (issue 52: seconds at 250,000 jobs;
fifty students looking after a deadline moved each made the board again, all at once)."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest
from helpers.rows import add_job, add_user

from raiprotocol.models import GradeRule, JobState
from raiserver.config import Settings
from raiserver.grading import grades as grades_module
from raiserver.grading import leaderboard
from raiserver.grading.grades import grades
from raiserver.grading.leaderboard import best_runs
from raiserver.services.warm import warm_pass
from raiserver.store.db import Database, migrate
from raiserver.store.tables import Kind


@pytest.fixture
def database(tmp_path):
    db = Database(f"sqlite:///{tmp_path / 'warm.sqlite3'}")
    migrate(db.engine)
    with db.session() as s:
        ann = add_user(s, "ann")
        for _ in range(3):
            job = add_job(s, ann, kind="m1")
            job.state = JobState.succeeded
        s.get_one(Kind, "m1").grading = GradeRule(rule="pass").model_dump()
        s.commit()
    yield db
    db.engine.dispose()


def made_from_every_run(monkeypatch) -> list[str]:
    """What was made from every run (not folded in since a kept look), each slowed down so that
    looks at once overlap."""
    made: list[str] = []
    candidates, runs = leaderboard.candidates, grades_module._runs

    def all_candidates(db, board, kind, users, after=None, owners=None, until=None):
        if after is None and owners is None:
            made.append(f"board {board}")
            time.sleep(0.3)
        return candidates(db, board, kind, users, after, owners, until)

    def all_runs(db, kind, after=None, owners=None, until=None):
        if after is None and owners is None:
            made.append(f"sheet {kind}")
            time.sleep(0.3)
        return runs(db, kind, after, owners, until)

    monkeypatch.setattr(leaderboard, "candidates", all_candidates)
    monkeypatch.setattr(grades_module, "_runs", all_runs)
    return made


def test_looks_at_once_make_a_board_and_a_sheet_once(database, monkeypatch):
    made = made_from_every_run(monkeypatch)
    settings = Settings()
    errors: list[BaseException] = []

    def look() -> None:
        try:
            with database.session() as s:
                best_runs(s, settings, "unverified")
                grades(s, settings, "m1")
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=look) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors
    assert sorted(made) == ["board unverified", "sheet m1"]


def test_after_the_background_pass_a_look_makes_nothing_from_every_run(database, monkeypatch):
    made = made_from_every_run(monkeypatch)
    settings = Settings()
    kept = warm_pass(SimpleNamespace(db=database, settings=settings))
    assert kept == ["board ranked", "board unverified", "sheet m1"]
    assert sorted(made) == ["board ranked", "board unverified", "sheet m1"]
    made.clear()
    with database.session() as s:
        best_runs(s, settings, "unverified")
        assert [row.username for row in grades(s, settings, "m1")[1]] == ["ann"]
    assert made == []


def test_the_background_pass_reads_no_run_of_the_last_minutes(database, monkeypatch):
    """A look folds in the runs that ended in the last minutes (store.db.SETTLE) for itself; the
    background pass does not read them: at 20 jobs a second they were 12,000 rows a pass, and each
    server process's memory grew with them (bench/fleet-sim.txt, 2026-11-30)."""
    asked: list[object] = []
    candidates, runs = leaderboard.candidates, grades_module._runs

    def all_candidates(db, board, kind, users, after=None, owners=None, until=None):
        asked.append(until)
        return candidates(db, board, kind, users, after, owners, until)

    def all_runs(db, kind, after=None, owners=None, until=None):
        asked.append(until)
        return runs(db, kind, after, owners, until)

    monkeypatch.setattr(leaderboard, "candidates", all_candidates)
    monkeypatch.setattr(grades_module, "_runs", all_runs)
    warm_pass(SimpleNamespace(db=database, settings=Settings()))
    assert len(asked) == 3 and None not in asked
    asked.clear()
    with database.session() as s:
        best_runs(s, Settings(), "unverified")
        grades(s, Settings(), "m1")
    assert asked == [None, None]  # a look reads up to now
