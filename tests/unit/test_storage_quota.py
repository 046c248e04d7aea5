"""Storage per student (issue 22: one job stored 1.13 GB in 44 s): usage counts each archive once
and every build folder; over the quota a submission is refused with what to delete; deleting a
job's files frees them (a shared archive only with its last job); retention spares graded runs."""

from __future__ import annotations

from datetime import timedelta

import pytest
from helpers.rows import add_job, add_user

from raiprotocol.models import JobState
from raiserver.config import Settings
from raiserver.errors import Conflict, OverQuota
from raiserver.jobs.retention import apply_retention, check_storage, delete_files, usage
from raiserver.store.db import utcnow

MiB = 1024**2


def finished(db, storage, owner, sha: str, archive: int, build: int, kind: str = "dev", days_ago: float = 0):
    job = add_job(db, owner, kind=kind)
    job.state, job.finished_at = JobState.succeeded, utcnow() - timedelta(days=days_ago)
    job.archive_sha256, job.archive_bytes = sha, archive
    storage.archive_path(sha).parent.mkdir(parents=True, exist_ok=True)
    storage.archive_path(sha).write_bytes(b"a")
    if build:
        job.has_build, job.build_bytes = True, build
        storage.build_path(job.id).write_bytes(b"b")
    storage.log_path(job.id).write_text("{}\n")
    db.commit()
    return job


def test_usage_counts_each_archive_once_and_every_build(db, services):
    alice = add_user(db, "alice")
    finished(db, services.storage, alice, "1" * 64, 100 * MiB, 300 * MiB)
    finished(db, services.storage, alice, "1" * 64, 100 * MiB, 0)  # the same project again
    big = finished(db, services.storage, alice, "2" * 64, 50 * MiB, 900 * MiB)
    u = usage(db, alice.id)
    assert (u.archives, u.builds) == (150 * MiB, 1200 * MiB)
    assert u.largest[0] == (big.id, 950 * MiB)


def test_over_the_quota_the_refusal_says_what_to_delete(db, services):
    settings = Settings(storage_mb_per_student=1024)
    alice = add_user(db, "alice")
    big = finished(db, services.storage, alice, "2" * 64, 50 * MiB, 900 * MiB)
    check_storage(db, alice, settings, incoming=50 * MiB)  # 1000 MiB: still inside
    with pytest.raises(OverQuota) as caught:
        check_storage(db, alice, settings, incoming=100 * MiB)
    message = str(caught.value)
    assert message.startswith("You store 950 MiB of your 1,024 MiB (archives 50 MiB, build folders 900 MiB)")
    assert "raiclient delete JOB" in message and big.id in message
    check_storage(db, add_user(db, "ta", role="ta"), settings, incoming=10**12)  # staff are exempt


def test_deleting_files_frees_them_and_a_shared_archive_goes_with_its_last_job(db, services):
    alice = add_user(db, "alice")
    first = finished(db, services.storage, alice, "3" * 64, 10 * MiB, 20 * MiB)
    second = finished(db, services.storage, alice, "3" * 64, 10 * MiB, 0)
    assert delete_files(db, services.storage, first) == 20 * MiB  # the archive is still second's
    assert services.storage.archive_path("3" * 64).exists() and not services.storage.build_path(first.id).exists()
    assert delete_files(db, services.storage, second) == 10 * MiB
    assert not services.storage.archive_path("3" * 64).exists()
    assert services.storage.log_path(first.id).exists()  # the log and results stay
    assert usage(db, alice.id).total == 0
    running = add_job(db, alice)
    with pytest.raises(Conflict):
        delete_files(db, services.storage, running)


def test_retention_removes_old_files_of_ungraded_runs_only(db, services):
    settings = Settings(retain_days=30, retain_log_days=180, verified_kind="final")
    alice = add_user(db, "alice")
    old_dev = finished(db, services.storage, alice, "4" * 64, MiB, 2 * MiB, days_ago=40)
    ancient = finished(db, services.storage, alice, "5" * 64, MiB, 0, days_ago=200)
    old_final = finished(db, services.storage, alice, "6" * 64, MiB, 2 * MiB, kind="final", days_ago=400)
    recent = finished(db, services.storage, alice, "7" * 64, MiB, 2 * MiB, days_ago=1)
    dry = apply_retention(db, services.storage, settings, apply=False)
    assert (dry.jobs, dry.logs) == (2, 1) and services.storage.build_path(old_dev.id).exists()
    done = apply_retention(db, services.storage, settings, apply=True)
    assert (done.jobs, done.logs) == (2, 1)
    assert not services.storage.build_path(old_dev.id).exists() and services.storage.log_path(old_dev.id).exists()
    assert not services.storage.log_path(ancient.id).exists()
    for kept in (old_final, recent):
        assert services.storage.build_path(kept.id).exists() and services.storage.log_path(kept.id).exists()
