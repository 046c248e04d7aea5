"""C25, library fallback (issue 46): the files of a ranked run's image that the course forbids
(``ranked.forbid``: file-name globs such as ``libcudnn*``) read as an empty file in its build's
container and in each of its timed runs' containers. In the build too: a student's source compiled
there could otherwise carry a forbidden library into the kept program (an ``.incbin`` of it) and
load it from memory at run time.

The files are found once per image on this worker, in a container of their own that runs nothing
of a job's, as root able to read every folder, over the image's file system and its volumes; each
by its real path and every other name of the same file (a hard link under another name)."""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

from docker.errors import DockerException

from .scripts import FORBIDDEN_FILES

MAX_FORBIDDEN = 500  # files a course's ranked.forbid may name in an image (each a mount in each container)
SAFE_PATH = re.compile(r"/[A-Za-z0-9._+@/-]{1,4000}")  # a path Docker's mount list takes as it is


class Unlisted(Exception):
    """The forbidden files could not be listed: the run cannot be held to the course's rule."""


_found: dict[tuple[str, tuple[str, ...]], list[str]] = {}
_lock = threading.Lock()


def forbidden_files(client: Any, image_id: str, globs: list[str], worker: str) -> list[str]:
    """The real paths of the image's files named by ``globs``, and every other name of each (a hard
    link), over its file system and its volumes (cached per image and globs)."""
    key = (image_id, tuple(globs))
    with _lock:
        if key in _found:
            return _found[key]
    expression: list[str] = []
    for glob in globs:
        expression += [*(["-o"] if expression else []), "-name", glob]
    try:
        volumes = sorted((client.images.get(image_id).attrs.get("Config") or {}).get("Volumes") or {})
        container = client.containers.run(
            image_id,
            ["/bin/sh", "-c", FORBIDDEN_FILES, "sh", *expression],
            user="0:0",
            environment={"ROOTS": "\n".join(["/", *volumes])},
            network_mode="none",
            cap_drop=["ALL"],
            cap_add=["DAC_READ_SEARCH"],  # every folder, whoever owns it (the job's user may cross one it cannot list)
            security_opt=["no-new-privileges"],
            read_only=True,
            mem_limit="256m",
            pids_limit=64,
            labels={"rai.worker": worker},
            detach=True,
        )
        try:
            status = container.wait(timeout=300).get("StatusCode")
            out = container.logs(stdout=True, stderr=False)
        finally:
            container.remove(force=True, v=True)  # and the image's volumes' copies
    except (DockerException, OSError) as exc:  # OSError: the engine did not answer in time
        raise Unlisted(f"the files the course forbids ({', '.join(globs)}) could not be listed: {str(exc)[:200]}") from None
    if status != 0:
        raise Unlisted(f"the files the course forbids ({', '.join(globs)}) could not be listed (status {status})")
    paths = sorted({p for p in out.decode("utf-8", "replace").splitlines() if p})
    if len(paths) > MAX_FORBIDDEN or not all(SAFE_PATH.fullmatch(p) for p in paths):
        raise Unlisted(f"the files the course forbids ({', '.join(globs)}) are too many or oddly named ({len(paths)})")
    with _lock:
        _found[key] = paths
    return paths


def empty_file(folder: Path) -> Path:
    """What each forbidden file reads as: an empty file of the job's folder, read-only."""
    empty = folder / "forbidden"
    if not empty.exists():
        empty.write_bytes(b"")
    empty.chmod(0o444)
    return empty
