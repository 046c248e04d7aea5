"""The Docker engine: this process's client, the containers a worker's run left, how a job's
container is named, and small helpers for execs and containers."""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

import docker
from docker.errors import APIError, DockerException, NotFound

from ...errors import ExecutorUnavailable
from ...lease import LEASE_EXIT

log = logging.getLogger("raiworker")

LABEL = "rai.job"
SPARE = "spare"  # the rai.job label of a container started ahead of time, before it has a job


def docker_client() -> docker.DockerClient:
    try:
        client = docker.from_env(timeout=60)
        client.ping()
        return client
    except DockerException as exc:
        raise ExecutorUnavailable(
            f"no Docker engine answers ({exc.__class__.__name__}); start dockerd or set RAI_EXECUTOR=process"
        ) from None


_shared: dict[int, docker.DockerClient] = {}  # per process: a client's sockets must not cross a fork
_shared_lock = threading.Lock()


def shared_client() -> docker.DockerClient:
    """This process's one Docker client, for every job it runs (a client per job, never closed,
    held its sockets to the engine for ever: a worker's descriptors grew with every job)."""
    with _shared_lock:
        client = _shared.get(os.getpid())
        if client is None:
            client = _shared[os.getpid()] = docker_client()
        return client


def remove_container(api: Any, name: str, wait: float = 30.0) -> bool:
    """Remove a container (force, with its anonymous volumes); whether there was one. One whose
    removal another caller already began (the engine answers 409, "removal … is already in
    progress": a worker's reaper and a job's recovery at once) is waited for until it is gone."""
    try:
        api.remove_container(name, force=True, v=True)
        return True
    except NotFound:
        return False
    except APIError as exc:
        if exc.status_code != 409:
            raise
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            api.inspect_container(name)
        except NotFound:
            return True
        time.sleep(0.1)
    raise APIError(f"container {name}: its removal, begun elsewhere, did not end in {wait:g} s")


def reap_containers(client: docker.DockerClient, worker: str, spares_only: bool = False) -> int:
    """Remove containers a previous run of this worker left (crash, kill -9), or at its end the
    spare containers its slots had started ahead of time."""
    n = 0
    labels = [f"rai.worker={worker}", *([f"{LABEL}={SPARE}"] if spares_only else [])]
    for row in client.api.containers(all=True, filters={"label": labels}):
        n += remove_container(client.api, row["Id"])
    return n


def remove_lapsed(client: docker.DockerClient, worker: str) -> int:
    """Remove this worker's containers that their lease's watcher ended (exit LEASE_EXIT): a run
    whose pool process was killed or paused leaves one, which nobody else removes. A run that
    comes back to find its container gone ends as a restart (``ContainerJob.lease_stopped``).

    And any worker's spare container that ended itself the same way: its worker died or stopped
    answering, and may never come back under its name (a worker container made anew, its work
    folder gone: `docker compose down -v`), so without this the host kept it for ever. A worker
    that does come back finds its spare gone and starts another (``spares._Slot.take``)."""
    n = 0
    lapsed = {"status": "exited", "exited": LEASE_EXIT}
    for label in (f"rai.worker={worker}", f"{LABEL}={SPARE}"):
        for row in client.api.containers(all=True, filters={"label": label, **lapsed}):
            n += remove_container(client.api, row["Id"])
    return n


def _runtimes(client: docker.DockerClient) -> dict[str, Any]:
    try:
        return dict(client.info().get("Runtimes") or {})
    except DockerException:
        return {}


def container_name(job_id: str, worker: str) -> str:
    """A job's container on a worker, by name (a spare is renamed so when a job takes it; labels
    cannot change): how a lost run's container is found."""
    return f"rai-{job_id}-{worker}".lower()[:120]


def _exit_code(api: Any, exec_id: str) -> int | None:
    """An exec's exit status; Docker may record it a moment after its output ends."""
    for _ in range(50):
        info = api.exec_inspect(exec_id)
        if not info.get("Running") and info.get("ExitCode") is not None:
            return int(info["ExitCode"])
        time.sleep(0.02)
    return None


def _close(conn: Any) -> None:
    """Close an exec's attached socket (the SDK's wrapper and the socket beneath it)."""
    for thing in (getattr(conn, "_sock", None), conn):
        try:
            if thing is not None:
                thing.close()
        except OSError:
            pass


def _remove_later(container: Any) -> None:
    """Remove the container in the background, trying again on any failure (its connection to the
    engine closed under it, a busy engine): what is still left is logged, and a restarted worker
    removes it (``reap_containers``)."""

    def remove() -> None:
        for attempt in range(3):
            try:
                container.remove(force=True, v=True)
                return
            except NotFound:
                return
            except Exception as exc:  # noqa: BLE001 - requests' errors are not DockerException
                if attempt == 2:
                    log.warning("container %s not removed: %s", container.short_id, exc)
                time.sleep(0.5)

    threading.Thread(target=remove, name=f"remove-{container.short_id}", daemon=True).start()
