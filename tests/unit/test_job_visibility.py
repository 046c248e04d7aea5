"""Who may see a job, however they name it: one rule (access.permissions.Principal.jobs_seen), the
same whether a whole id or a start or an end of one is given, and "no such job" for the rest so
that others' ids leak nothing."""

from __future__ import annotations

import pytest
from helpers.rows import add_job, add_user

from raiserver.access.permissions import Principal
from raiserver.errors import NotFound
from raiserver.jobs.lookup import visible_job

SEES = {"owner": True, "teammate": True, "stranger": False, "teamless": False, "ta": True}


@pytest.fixture
def job_and_people(db):
    owner, mate, stranger = add_user(db, "ann"), add_user(db, "bob"), add_user(db, "cid")
    teamless, ta = add_user(db, "dee"), add_user(db, "tom", role="ta")
    owner.team = mate.team = "t1"
    stranger.team = "t2"
    db.commit()
    other = add_job(db, stranger)  # another team's job beside it: never the answer to an owner's name
    other.id = "K" + other.id[1:]  # ... which a start of the job's id does not name
    db.commit()
    job = add_job(db, owner)
    people = {"owner": owner, "teammate": mate, "stranger": stranger, "teamless": teamless, "ta": ta}
    return job, people


@pytest.mark.parametrize("who", SEES)
@pytest.mark.parametrize("named_by", ["whole id", "lower case", "start", "end"])
def test_a_job_is_seen_by_its_owner_teammates_and_staff_only(db, job_and_people, who, named_by):
    job, people = job_and_people
    name = {"whole id": job.id, "lower case": job.id.lower(), "start": job.id[:-1], "end": job.id[-8:]}[named_by]
    p = Principal(people[who])
    if SEES[who]:
        assert visible_job(db, p, name).id == job.id
    else:
        with pytest.raises(NotFound, match="no job"):
            visible_job(db, p, name)


@pytest.mark.parametrize("team", [None, ""])
def test_a_student_without_a_team_sees_no_teamless_strangers_job(db, team):
    """A missing or empty team is no team: two students without one are not each other's teammates."""
    ann, bob = add_user(db, "ann"), add_user(db, "bob")
    ann.team = bob.team = team
    db.commit()
    job = add_job(db, ann)
    assert visible_job(db, Principal(ann), job.id).id == job.id
    with pytest.raises(NotFound):
        visible_job(db, Principal(bob), job.id)
