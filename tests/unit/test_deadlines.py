"""A run counts (ranks, earns a grade) only inside its owner's own deadline: the kind's, moved by
their or their team's extension, or paid for with late days (issue 36)."""

from __future__ import annotations

from datetime import timedelta

from helpers.rows import add_job, add_user

from raiprotocol.models import ExtensionIn, KindIn
from raiserver.config import Settings
from raiserver.grading.kinds import Deadlines, grant, update_kind
from raiserver.store.db import utcnow


def test_extensions_and_late_days_decide_what_counts(db):
    now = utcnow()
    update_kind(db, "final", KindIn(due=(now - timedelta(hours=5)).isoformat(), late_policy="mark"), create=True)
    update_kind(db, "m2", KindIn(due=(now - timedelta(hours=5)).isoformat(), late_policy="days"), create=True)
    ann, ben, cat = add_user(db, "ann"), add_user(db, "ben"), add_user(db, "cat")
    ben.team = cat.team = "t1"
    db.commit()
    grant(db, "final", ExtensionIn(team="t1", hours=10), by="prof")
    db.commit()
    late = [add_job(db, u, kind="final", seconds_ago=3600) for u in (ann, ben, cat)]
    d = Deadlines(db, Settings(late_days=3))
    assert [d.counts(j) for j in late] == [False, True, True]  # the team's extension covers both members
    assert d.late_by(late[0]) is not None and timedelta(hours=3, minutes=59) < d.late_by(late[0]) <= timedelta(hours=4, seconds=5)

    paid = add_job(db, ann, kind="m2", seconds_ago=0)
    unpaid = add_job(db, ben, kind="m2", seconds_ago=0)
    paid.late_days = 1
    db.commit()
    d = Deadlines(db, Settings(late_days=3))
    assert (d.counts(paid), d.counts(unpaid)) == (True, False)
    assert (d.days_used(ann), d.days_left(ann), d.days_left(ben)) == (1, 2, 3)
