"""The migrations build exactly the tables the code declares, and a job's state reads back as the
JobState it was written as, stored as plain text (databases from before the Enum column still read)."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from helpers.rows import add_job, add_user
from sqlalchemy import text

from raiprotocol.models import JobState
from raiserver.store.db import Base
from raiserver.store.tables import Job


def test_migrations_match_the_tables(db):
    with db.get_bind().connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == []


def test_state_is_an_enum_stored_as_its_name(db):
    job = add_job(db, add_user(db, "alice"))
    job.state = JobState.timed_out
    db.commit()
    assert db.execute(text("SELECT state FROM jobs WHERE id = :id"), {"id": job.id}).scalar_one() == "timed_out"
    db.execute(text("UPDATE jobs SET state = 'cancelled' WHERE id = :id"), {"id": job.id})
    db.commit()
    db.expire_all()
    assert db.get(Job, job.id).state is JobState.cancelled
