"""Naming a job by part of its id (issue 37): the web view's lists show a job id's last 8
characters, so `raiclient status` and the pages take a unique end as well as a unique start."""

from __future__ import annotations

import pytest
from helpers.rows import add_job, add_user

from raiserver.access.permissions import Principal
from raiserver.errors import Conflict, NotFound
from raiserver.jobs.lookup import visible_job
from raiserver.jobs.views import short_id


def named(db, owner, job_id: str):
    assert len(job_id) == 26
    job = add_job(db, owner)
    job.id = job_id
    db.commit()
    return job


def test_the_short_id_a_list_shows_names_the_job(db):
    ann = add_user(db, "ann")
    a = named(db, ann, "01JAAAAAAAAAAAAAAAAQWERTY1")
    named(db, ann, "01JAAAAAAAAAAAAAAAAZXCVBN2")
    me = Principal(ann)
    assert visible_job(db, me, short_id(a.id)) is a
    assert visible_job(db, me, short_id(a.id).lower()) is a
    assert visible_job(db, me, "01JAAAAAAAAAAAAAAAAQ") is a  # a unique start still works
    with pytest.raises(Conflict, match="is the start of several jobs"):
        visible_job(db, me, "01JAAAAAAA")


def test_an_end_of_someone_elses_job_finds_nothing(db):
    ann, ben = add_user(db, "ann2"), add_user(db, "ben2")
    theirs = named(db, ben, "01JBBBBBBBBBBBBBBBBASDFGH3")
    with pytest.raises(NotFound, match="none of yours starts or ends with it"):
        visible_job(db, Principal(ann), short_id(theirs.id))
