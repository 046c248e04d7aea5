"""The cgroup v2 folder a timed run's processes live in (issue 46).

rai-timed, root in the timed run's container, must freeze, count and kill every process of the job
at once, and nothing of the job may reach those controls. The container is made under a cgroup
parent of its own (``/rai-timed-<random>``, Docker's cgroupfs driver), that parent's folder is
bind-mounted into root's folder of the container (``/opt/rai/measure/cg``, mode 0700), and once the
container runs the worker makes ``<container>/job`` there: an empty cgroup inside the container's
(its memory, CPU and process limits still hold) that rai-timed's child enters before it becomes the
job's user. cgroup v2 only: a pure v2 host (``/sys/fs/cgroup``) or the unified hierarchy of a hybrid
one (``/sys/fs/cgroup/unified``), which Docker's runc fills as well.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from .scripts import CGROUP_IN_CONTAINER

CGROUP_FS = Path("/sys/fs/cgroup")
_V2_ROOTS = (CGROUP_FS, CGROUP_FS / "unified")


class NoCgroup(Exception):
    """This worker cannot give a timed run a cgroup of its own; the message says why, for the log."""


def v2_root() -> Path | None:
    """Where the host's cgroup v2 hierarchy is mounted (writable by this process), if anywhere."""
    for root in _V2_ROOTS:
        if (root / "cgroup.controllers").is_file():
            return root
    return None


@dataclass
class TimedCgroup:
    """One timed run's cgroup parent: made before its container, removed after it."""

    root: Path
    name: str  # rai-timed-<random>: Docker's cgroup_parent is /<name>

    @classmethod
    def make(cls, driver: str | None) -> TimedCgroup:
        if driver != "cgroupfs":
            raise NoCgroup(f"the Docker engine's cgroup driver is {driver or 'unknown'}; ranked runs need cgroupfs")
        root = v2_root()
        if root is None:
            raise NoCgroup("this host has no cgroup v2 hierarchy that the worker can write (/sys/fs/cgroup)")
        cg = cls(root, f"rai-timed-{secrets.token_hex(8)}")
        try:
            cg.folder.mkdir()
        except OSError as exc:
            raise NoCgroup(f"the worker cannot make a cgroup in {root} ({exc.strerror})") from None
        return cg

    @property
    def parent(self) -> str:
        return f"/{self.name}"

    @property
    def folder(self) -> Path:
        return self.root / self.name

    def job(self, container_id: str, name: str) -> str:
        """Make a run's empty cgroup in the running container's; its path as rai-timed sees it."""
        (self.folder / container_id / name).mkdir()
        return f"{CGROUP_IN_CONTAINER}/{container_id}/{name}"

    def release_jobs(self, container_id: str) -> None:
        """Before the container goes: the engine cannot remove a cgroup that still has children."""
        with contextlib.suppress(OSError):
            for child in (self.folder / container_id).iterdir():
                if child.is_dir():
                    _rmdir(child)

    def remove(self) -> None:
        """Once the container is gone: this run's parent, in every hierarchy the engine made it in
        (a hybrid host's v1 controllers beside the unified one; a pure v2 host has only the one)."""
        hybrid = self.root != CGROUP_FS
        for hierarchy in [self.root, *(p for p in CGROUP_FS.iterdir() if hybrid and p.is_dir() and p != self.root)]:
            _rmdir(hierarchy / self.name)


def _rmdir(path: Path) -> None:
    """A cgroup folder, once its last process is gone (that may take a moment after a kill)."""
    for _ in range(50):
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.02)
    with contextlib.suppress(OSError):
        path.rmdir()


def reap_parents(roots: list[Path] | None = None, max_age: float = 600.0) -> int:
    """Now and then (tidy_host, from the first heartbeat on): the timed runs' cgroup parents a run
    that never ended left (its worker killed mid-run; reap_containers removed its containers), in
    every hierarchy, once older than
    ``max_age`` seconds (a parent another worker of this host has just made for its run is not
    touched) and with no process (cgroup v2's ``populated``, in the first of ``roots``): a parent in
    use stays whole. Returns how many went."""
    if roots is None:
        root = v2_root()
        hybrid = root is not None and root != CGROUP_FS  # v1 controllers beside the unified one (TimedCgroup.remove)
        roots = [] if root is None else [root, *(p for p in CGROUP_FS.iterdir() if hybrid and p.is_dir() and p != root)]
    removed = 0
    now = time.time()
    for hierarchy in roots:
        for parent in hierarchy.glob("rai-timed-*"):
            try:
                if now - parent.stat().st_mtime < max_age or _populated(roots[0] / parent.name):
                    continue  # just made (its container not there yet), or a process lives in it
            except OSError:
                continue
            for folder, _, _ in os.walk(parent, topdown=False):  # the run's cgroup, its container's, the parent
                with contextlib.suppress(OSError):
                    os.rmdir(folder)
            removed += not parent.exists()
    return removed


def _populated(folder: Path) -> bool:
    """Whether a process lives in the cgroup or below it (cgroup v2's cgroup.events)."""
    try:
        return "populated 1" in (folder / "cgroup.events").read_text()
    except FileNotFoundError:
        return False
