"""Fixtures with real parts: a private redis-server, PostgreSQL, a Docker engine, and the
service itself (server + worker as separate processes) driven with the real client. The code
behind them, and what tests share besides fixtures, is in ``helpers/``."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from helpers import PG_BASE, Service, redis_binary, start_redis, start_service

REQUIRE_DOCKER = os.environ.get("RAI_REQUIRE_DOCKER") == "1"


# -- the suite in shares (scripts/test.sh runs two at once) ------------------------------------
SHARES = ("engine", "beside", "rest", "alone")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--share",
        choices=SHARES,
        help="run one share of the suite: engine (the tests on the Docker engine, one session at a time), beside "
        "(those on the engine through workers of their own, marked own_workers), rest (those that need no engine), "
        "alone (the load benches, marked alone: on a quiet machine); all but alone can run at once",
    )


def share_of(item: pytest.Item) -> str:
    if item.get_closest_marker("alone"):
        return "alone"
    if item.get_closest_marker("own_workers"):
        return "beside"
    return "engine" if "docker_engine" in getattr(item, "fixturenames", ()) else "rest"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    share = config.getoption("--share")
    if share is None:
        return
    dropped = [item for item in items if share_of(item) != share]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if share_of(item) == share]


# -- Redis ------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory) -> Iterator[str]:
    url, proc = start_redis(redis_binary("7"), tmp_path_factory.mktemp("redis"))
    yield url
    proc.terminate()
    proc.wait(10)


@pytest.fixture(scope="session", params=["7", "6.2"])
def any_redis(request, tmp_path_factory) -> Iterator[str]:
    """Each Redis version the service supports, in turn."""
    url, proc = start_redis(redis_binary(request.param), tmp_path_factory.mktemp(f"redis-{request.param}"))
    yield url
    proc.terminate()
    proc.wait(10)


# -- PostgreSQL -------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A fresh database on the machine's PostgreSQL, dropped afterwards."""
    import psycopg

    name = f"rai_test_{uuid.uuid4().hex[:8]}"
    dsn = PG_BASE.replace("postgresql+psycopg://", "postgresql://")
    try:
        with psycopg.connect(f"{dsn}/postgres", autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError as exc:
        if os.environ.get("RAI_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"PostgreSQL not reachable at {dsn}: {exc}")
        pytest.skip(f"PostgreSQL not reachable at {dsn}")
    yield f"{PG_BASE}/{name}"
    with psycopg.connect(f"{dsn}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# -- Docker -----------------------------------------------------------------------------------
_ENGINE_LOCK: list = []


def _one_suite_per_engine() -> None:
    """Two test sessions on one Docker engine would remove each other's containers (every test
    service names its worker w1, and a worker reaps its name's containers at start): a second
    session waits for the first, saying so, instead of failing in ways that look like bugs."""
    import fcntl
    import sys

    f = open("/tmp/rai-tests-docker.lock", "w")  # noqa: SIM115 - held for the whole session
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print("\nanother test session holds the Docker engine; waiting for it to end", file=sys.stderr, flush=True)
        fcntl.flock(f, fcntl.LOCK_EX)
    _ENGINE_LOCK.append(f)


@pytest.fixture(scope="session")
def docker_engine(request: pytest.FixtureRequest):
    if request.config.getoption("--share") != "beside":  # the beside share's workers have names of their own
        _one_suite_per_engine()
    try:
        import docker

        client = docker.from_env(timeout=30)
        client.ping()
    except Exception as exc:
        if REQUIRE_DOCKER:
            pytest.fail(f"Docker engine required but not reachable: {exc}")
        pytest.skip("no Docker engine")
    from raiworker.images import ensure_busybox_image

    assert ensure_busybox_image(client), "install busybox-static to build rai/busybox"
    return client


# -- the service ------------------------------------------------------------------------------


_redis_db = 0


@pytest.fixture(scope="module")
def docker_service(tmp_path_factory, redis_url, docker_engine) -> Iterator[Service]:
    svc = start_service(tmp_path_factory.mktemp("svc-docker"), redis_url, None, "docker")
    yield svc
    svc.shutdown()


@pytest.fixture(scope="module")
def pg_service(tmp_path_factory, redis_url, pg_url, docker_engine) -> Iterator[Service]:
    svc = start_service(tmp_path_factory.mktemp("svc-pg"), redis_url, pg_url, "docker")
    yield svc
    svc.shutdown()


@pytest.fixture(scope="module")
def process_service(tmp_path_factory, redis_url) -> Iterator[Service]:
    svc = start_service(tmp_path_factory.mktemp("svc-process"), redis_url, None, "process")
    yield svc
    svc.shutdown()


# -- the browser (the web view's tests) -------------------------------------------------------
@pytest.fixture(scope="module")
def browser():
    """Debian's headless Chromium, driven by Playwright."""
    import shutil

    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.fail("Chromium is required (apt-get install chromium)")
    with sync_playwright() as pw:
        b = pw.chromium.launch(
            executable_path=chromium,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        yield b
        b.close()
