"""What tests share besides fixtures (``conftest.py`` holds only those): the real service
started and waited on (``service``), projects, build files and archives as students make them (``projects``), database rows for
the unit tier (``rows``) and the live
log stream read back (``sse``). Imported as ``from helpers import …``."""

from .projects import GOOD_SPEC, build_file, make_project, tar_gz
from .service import (
    BUSYBOX,
    PG_BASE,
    ROOT,
    Service,
    free_port,
    fresh_pg,
    jobs_at_their_end,
    redis_binary,
    start_redis,
    start_service,
    wait_for,
)
from .sse import aevents, events, read_log

__all__ = [
    "aevents",
    "BUSYBOX",
    "GOOD_SPEC",
    "PG_BASE",
    "ROOT",
    "Service",
    "build_file",
    "events",
    "free_port",
    "fresh_pg",
    "jobs_at_their_end",
    "make_project",
    "read_log",
    "redis_binary",
    "start_redis",
    "start_service",
    "tar_gz",
    "wait_for",
]
