"""Issue 25, what an operator does besides starting the service: upgrade a database made by the
previous release in place, and back up (PostgreSQL dump + the data folder) then restore into a
fresh database and folder, with the README's own commands ("Operate it")."""

from __future__ import annotations

import io
import re
import subprocess
import tarfile
import uuid
from pathlib import Path

import psycopg
import pytest
from alembic import command
from alembic.config import Config
from helpers import PG_BASE, make_project, start_service
from sqlalchemy import create_engine, text

pytestmark = pytest.mark.timeout(240)
# the newest migration: what a database is at once migrated (its file name's number)
VERSIONS = Path(__file__).resolve().parent.parent / "server/raiserver/migrations/versions"
HEAD = max(p.name[:4] for p in VERSIONS.glob("[0-9][0-9][0-9][0-9]_*.py"))

PREVIOUS_RELEASE_HEAD = "0007"  # migration head of 08bee94, the last commit that landed before 0008


def libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


def fresh_database() -> str:
    name = f"rai_test_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(f"{libpq(PG_BASE)}/postgres", autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"{PG_BASE}/{name}"


def drop_database(url: str) -> None:
    with psycopg.connect(f"{libpq(PG_BASE)}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1]}" WITH (FORCE)')


@pytest.fixture
def own_pg(pg_url):
    """A database of this test's own (the session's pg_url is shared with other tests, already at
    the head migration): the upgrade must start from the old schema, the backup hold only this."""
    url = fresh_database()
    yield url
    drop_database(url)


def test_a_database_of_the_previous_release_upgrades_in_place(tmp_path, redis_url, own_pg):
    pg_url = own_pg
    from raiserver.access.auth import hash_secret
    from raiserver.store.db import HERE

    engine = create_engine(pg_url)
    cfg = Config()
    cfg.set_main_option("script_location", str(HERE / "migrations"))
    with engine.begin() as conn:  # the schema the previous release left, with its data
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, PREVIOUS_RELEASE_HEAD)
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == PREVIOUS_RELEASE_HEAD
        conn.execute(
            text(
                "INSERT INTO users (id, username, role, access_key, secret_hash, active, created_at) VALUES "
                "(100, 'old_student', 'student', 'oldkey', :h, true, now())"
            ),
            {"h": hash_secret("oldsecret")},
        )
        conn.execute(
            text(
                "INSERT INTO jobs (id, owner_id, queue, kind, state, image, spec_yaml, archive_sha256, archive_bytes, gpu_count, "
                "created_at, dispatched_at, finished_at, attempt, cancel_requested, has_build, results) VALUES "
                "('01JOLDJOBOLDJOBOLDJOBOLDJO', 100, 'gpu', 'final', 'succeeded', 'rai/busybox:latest', 'x', 'abc', 10, 0, "
                "now(), '2026-01-02T03:04:05+00:00', now(), 1, false, false, :r)"
            ),
            {"r": '{"op_times": [0.5], "op_time_total": 0.5, "correctness": {"m": 0.9}}'},
        )
    engine.dispose()
    svc = start_service(tmp_path / "svc", redis_url, pg_url, "process", worker=False)  # migrates at start
    try:
        import httpx

        r = httpx.get(f"{svc.url}/api/v1/jobs/01JOLDJOBOLDJOBOLDJOBOLDJO", auth=("oldkey", "oldsecret"), timeout=10)
        assert r.status_code == 200, r.text
        assert r.json()["state"] == "succeeded" and r.json()["results"]["op_time_total"] == 0.5
        assert r.json()["released_at"].startswith("2026-01-02T03:04:05")  # the column's new name kept its value
        with psycopg.connect(libpq(pg_url)) as conn:
            head = conn.execute("SELECT version_num FROM alembic_version").fetchone()[0]
            kept = conn.execute("SELECT archive_kept, build_bytes, course_build_id FROM jobs").fetchone()
        assert head == HEAD and kept == (True, 0, None)
        board = httpx.get(f"{svc.url}/api/v1/leaderboard", params={"board": "unverified"}, auth=("oldkey", "oldsecret")).json()
        assert [e["op_time"] for e in board] == [0.5]  # its printed result is still shown, apart
    finally:
        svc.shutdown()


def test_a_backup_restores_into_a_fresh_database_and_folder(tmp_path, redis_url, own_pg):
    pg_url = own_pg
    svc = start_service(tmp_path / "old", redis_url, pg_url, "process")
    student = svc.add_user("keeper")
    try:
        proj = make_project(tmp_path / "p", ["echo hello from the old box", "sh -c 'echo kept > result.txt'"])
        res = svc.client("submit", "-p", str(proj), env={"RAI_PROFILE": str(student)})
        assert res.returncode == 0, res.stdout + res.stderr
        job_id = re.search(r"Job (\S+) queued", res.stdout).group(1)
    finally:
        svc.shutdown()
    # the backup, as README "Operate it" says: the database and the data folder
    dump, folder = tmp_path / "rai.dump", tmp_path / "rai-data.tar.gz"
    subprocess.run(["pg_dump", "--format=custom", "--no-owner", "--file", str(dump), libpq(pg_url)], check=True)
    subprocess.run(["tar", "-C", str(svc.data), "-czf", str(folder), "."], check=True)
    # a fresh machine: an empty database and folder, restored
    new_db = fresh_database()
    try:
        subprocess.run(["pg_restore", "--no-owner", "--dbname", libpq(new_db), str(dump)], check=True)
        new_data = tmp_path / "new" / "data"
        new_data.mkdir(parents=True)
        subprocess.run(["tar", "-C", str(new_data), "-xzf", str(folder)], check=True)
        restored = start_service(tmp_path / "new", redis_url, new_db, "process", worker=False)
        try:
            with restored.http(student) as h:  # the student's old keys: they were in the database
                job = h.get(f"/api/v1/jobs/{job_id}").json()
                log = h.get(f"/api/v1/jobs/{job_id}/log.txt").text
                build = h.get(f"/api/v1/jobs/{job_id}/build.tar.gz")
            assert job["state"] == "succeeded" and "hello from the old box" in log
            with tarfile.open(fileobj=io.BytesIO(build.content)) as tar:
                member = next(m for m in tar.getmembers() if m.name.removeprefix("./") == "result.txt")
                assert tar.extractfile(member).read() == b"kept\n"
        finally:
            restored.shutdown()
    finally:
        drop_database(new_db)


def test_four_server_processes_starting_together_migrate_a_fresh_database_once(own_pg):
    """What `docker compose up` does: four server processes migrate the same empty database at the
    same moment. Each must start (none may die on a table another is creating); one row of
    alembic_version says the schema was made once."""
    import sys

    script = "import sys; from raiserver.store.db import Database, migrate; migrate(Database(sys.argv[1]).engine); print('ok')"
    procs = [
        subprocess.Popen([sys.executable, "-c", script, own_pg], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    results = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], [err[-2000:] for _, err in results]
    with psycopg.connect(libpq(own_pg)) as conn:
        assert conn.execute("SELECT count(*), min(version_num) FROM alembic_version").fetchone() == (1, HEAD)
        kinds = [r[0] for r in conn.execute("SELECT name FROM kinds ORDER BY name")]
        assert kinds == ["dev", "final", "m1", "m2", "m3"]  # seeded once, from RAI_KINDS's default


# -- the operator's tools (issue 37) -----------------------------------------------------------


def _path_without(tmp_path, *missing: str) -> str:
    """A PATH with every command of this machine but ``missing``."""
    import os

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for folder in ("/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin"):
        for entry in os.scandir(folder) if os.path.isdir(folder) else []:
            target = bin_dir / entry.name
            if entry.name not in missing and not target.exists():
                target.symlink_to(entry.path)
    return str(bin_dir)


def test_standins_without_mmdebstrap_fail_loudly_and_leave_no_image(tmp_path, docker_engine):
    """images/standins/build.sh without mmdebstrap imported an empty image, and later runs skipped it."""
    import os

    from helpers import ROOT

    repo = f"rai-standin-probe-{uuid.uuid4().hex[:6]}"
    env = {**os.environ, "PATH": _path_without(tmp_path, "mmdebstrap"), "RAI_STANDIN_REPO": repo}
    try:
        res = subprocess.run(["bash", str(ROOT / "images/standins/build.sh")], env=env, capture_output=True, text=True, timeout=120)
        assert res.returncode != 0, res.stdout + res.stderr
        assert "mmdebstrap is not installed" in res.stderr and "apt-get install mmdebstrap" in res.stderr, res.stderr
        assert docker_engine.images.list(name=f"{repo}/python") == []
        # an empty image left by the old script is not taken as made: it is removed and made again
        subprocess.run(["docker", "import", "-", f"{repo}/python:3.11"], input=b"", check=True, capture_output=True, timeout=60)
        res = subprocess.run(["bash", str(ROOT / "images/standins/build.sh")], env=env, capture_output=True, text=True, timeout=120)
        assert res.returncode != 0 and f"{repo}/python:3.11 exists but is empty or broken" in res.stderr, res.stderr
        assert docker_engine.images.list(name=f"{repo}/python") == []
    finally:
        for image in docker_engine.images.list(name=f"{repo}/python"):
            docker_engine.images.remove(image.id, force=True)


def test_compose_script_runs_whichever_compose_there_is(tmp_path):
    """`docker compose up -d` failed where only docker-compose 1.29 exists: scripts/compose.sh picks."""
    import os
    import shutil

    from helpers import ROOT

    res = subprocess.run(
        ["bash", str(ROOT / "scripts/compose.sh"), "-f", str(ROOT / "docker-compose.yml"), "config", "--services"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if shutil.which("docker-compose") or subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        assert res.returncode == 0 and {"server", "worker", "postgres", "redis"} <= set(res.stdout.split()), res.stdout + res.stderr
    env = {**os.environ, "PATH": _path_without(tmp_path, "docker-compose", "docker")}
    res = subprocess.run(["bash", str(ROOT / "scripts/compose.sh"), "up", "-d"], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 127 and "install one, e.g. apt-get install docker-compose" in res.stderr, res.stderr


def test_the_build_context_is_the_sources_not_the_checkout(tmp_path, docker_engine):
    """No .dockerignore: the service image's build sent a 524 MB context (.venv, .git, GPU outputs…)."""
    import os

    from helpers import ROOT

    probe = ROOT / ".dev" / "dockerignore-probe.bin"  # a large file where local outputs go
    probe.parent.mkdir(exist_ok=True)
    probe.write_bytes(os.urandom(20 * 1024 * 1024))
    try:
        res = subprocess.run(
            ["docker", "build", "-f", "-", str(ROOT)],
            input="FROM scratch\n",
            capture_output=True,
            text=True,
            env={**os.environ, "DOCKER_BUILDKIT": "0"},
            timeout=300,
        )
    finally:
        probe.unlink()
    sent = re.search(r"Sending build context to Docker daemon\s+([\d.]+)([kKMG]?B)", res.stdout + res.stderr)
    assert sent, res.stdout + res.stderr
    size = float(sent.group(1)) * {"B": 1, "kB": 1e3, "KB": 1e3, "MB": 1e6, "GB": 1e9}[sent.group(2)]
    assert size < 5e6, sent.group(0)
