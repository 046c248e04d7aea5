"""Job images on this worker: which it offers (advertised in heartbeats, checked before a job
starts), pre-pulls staff ask for, and images built on the spot for hosts that reach no registry.

A worker offers only images that were published on it, each recorded by its image id (a
content hash, which no other image can have) in ``published-images.json`` in its work folder,
which only the operator and rai write: ``raiworker publish IMAGE`` (the operator), the names in
``RAI_WORKER_IMAGES`` (the operator too; resolved to their ids when the worker starts, so a later
retag cannot swap them), images staff pulled or loaded through rai (recorded when the pull or load
is done), and rai's own ``rai/busybox``. An image's labels grant nothing: a label is inherited by
every image built ``FROM`` it, so ``rai.course`` offered a staff image derived from ``rai/busybox``
(and one labelled ``rai.course="false"``) to students, who read the staff's answers with it.

``rai/busybox`` is made from the host's statically linked busybox (Debian: busybox-static) with
``docker import``: a shell and the usual tools in about 2 MB, enough for examples/hello and tests.
"""

from __future__ import annotations

import fcntl
import io
import json
import logging
import os
import shutil
import subprocess
import tarfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import docker

from raiprotocol.models import PullRequest
from raiprotocol.spec import normalize_image

from .config import WorkerSettings
from .errors import ImageLoadFailed
from .server import ServerClient

log = logging.getLogger("raiworker")

BUSYBOX_TAG = "rai/busybox:latest"
# set on rai/busybox for workers of earlier releases on the same host (they offered any image with
# it); this release reads it only to know rai's own busybox image, never to offer another image
COURSE_LABEL = "rai.course"
PUBLISHED_FILE = "published-images.json"  # in the work folder: image id -> {names, why, at}
OLD_PULLED_FILE = "rai-images"  # an earlier release's list of names pulled through rai
NAMED = "named in RAI_WORKER_IMAGES"  # the reason of the entries the worker's start writes
BUSYBOX_WHY = "rai's own busybox image (one layer, imported by rai)"


def _busybox_rootfs(busybox: Path) -> bytes:
    buf = io.BytesIO()
    now = time.time()

    def add_dir(tar: tarfile.TarFile, name: str, mode: int = 0o755) -> None:
        info = tarfile.TarInfo(name)
        info.type, info.mode, info.mtime = tarfile.DIRTYPE, mode, now
        tar.addfile(info)

    def add_file(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = len(data), mode, now
        tar.addfile(info, io.BytesIO(data))

    applets = subprocess.run([str(busybox), "--list"], capture_output=True, text=True, check=True).stdout.split()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for d in ("bin", "etc", "src", "build", "root"):
            add_dir(tar, d)
        add_dir(tar, "tmp", 0o1777)
        add_file(tar, "bin/busybox", busybox.read_bytes(), 0o755)
        for app in applets:
            if app != "busybox":
                info = tarfile.TarInfo(f"bin/{app}")
                info.type, info.linkname, info.mode, info.mtime = tarfile.SYMTYPE, "busybox", 0o777, now
                tar.addfile(info)
        add_file(tar, "etc/passwd", b"root:x:0:0::/root:/bin/sh\nrai:x:1000:1000::/build:/bin/sh\n")
        add_file(tar, "etc/group", b"root:x:0:\nrai:x:1000:\n")
    return buf.getvalue()


def is_rai_busybox(image: Any) -> bool:
    """Whether an image is one rai imported (ensure_busybox_image, images/busybox/build.sh): a
    single layer, so no image built FROM it (which adds layers) passes for it."""
    attrs = image.attrs or {}
    config = attrs.get("Config") or {}
    return (
        len((attrs.get("RootFS") or {}).get("Layers") or []) == 1
        and config.get("Cmd") == ["/bin/sh"]
        and (config.get("Labels") or {}).get(COURSE_LABEL) == "true"
    )


def ensure_busybox_image(client: docker.DockerClient, tag: str = BUSYBOX_TAG, work_dir: Path | None = None) -> bool:
    """Import the image unless rai's own is there; with ``work_dir``, publish it on that worker.
    False when the host has no static busybox."""
    try:
        ready = is_rai_busybox(client.images.get(tag))
    except docker.errors.ImageNotFound:
        ready = False
    if not ready:
        found = shutil.which("busybox")
        if not found:
            return False
        repo, _, version = tag.partition(":")
        client.api.import_image_from_data(
            _busybox_rootfs(Path(found)),
            repository=repo,
            tag=version or "latest",
            changes=['CMD ["/bin/sh"]', f'LABEL {COURSE_LABEL}="true"'],
        )
    if work_dir is not None:
        publish(client, work_dir, tag, BUSYBOX_WHY)
    return True


# -- what this worker offers -------------------------------------------------------------------------


@contextmanager
def _record(work_dir: Path) -> Iterator[dict[str, dict[str, Any]]]:
    """The published images, to change: one writer at a time (the heartbeat's pulls, the operator's
    `raiworker publish`), the file replaced whole."""
    work_dir.mkdir(parents=True, exist_ok=True)
    with open(work_dir / f"{PUBLISHED_FILE}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        entries = published(work_dir)
        yield entries
        tmp = work_dir / f"{PUBLISHED_FILE}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        with os.fdopen(fd, "w") as fh:
            json.dump(entries, fh, indent=1, sort_keys=True)
            fh.write("\n")
        os.replace(tmp, work_dir / PUBLISHED_FILE)


def published(work_dir: Path) -> dict[str, dict[str, Any]]:
    """image id -> {"names": [...], "why": ..., "at": ...}; empty if nothing was published."""
    try:
        data = json.loads((work_dir / PUBLISHED_FILE).read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:  # nothing is offered rather than a guess
        log.error("%s cannot be read (%s): no image is offered until it is mended or removed", work_dir / PUBLISHED_FILE, exc)
        return {}
    return (
        {k: v for k, v in data.items() if isinstance(k, str) and k.startswith("sha256:") and isinstance(v, dict)}
        if isinstance(data, dict)
        else {}
    )


def _names(image: Any) -> list[str]:
    return sorted({normalize_image(t) for t in image.tags or []})


def publish(client: docker.DockerClient, work_dir: Path, ref: str, why: str) -> tuple[str, list[str]]:
    """Offer the image ``ref`` names now, by its id: (id, names). ImageNotFound if there is none."""
    image = client.images.get(ref)
    publish_image(work_dir, image, why, ref)
    return image.id, _names(image)


def publish_image(work_dir: Path, image: Any, why: str, ref: str = "") -> None:
    """Offer this image (a docker Image) by its id."""
    with _record(work_dir) as entries:
        entries[image.id] = {
            "names": _names(image) or ([normalize_image(ref)] if ref else []),
            "why": why,
            "at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }


def withdraw(client: docker.DockerClient | None, work_dir: Path, ref: str) -> list[str]:
    """Offer it no more: ``ref`` is an image id (or its start) or a name, as recorded or as the
    host resolves it now. Returns the ids withdrawn."""
    want = {ref} if ref.startswith("sha256:") else {normalize_image(ref)}
    if client is not None and not ref.startswith("sha256:"):
        with suppress(docker.errors.ImageNotFound):
            want.add(client.images.get(ref).id)
    with _record(work_dir) as entries:
        gone = [
            i
            for i, e in entries.items()
            if i in want or any(i.startswith(w) for w in want if w.startswith("sha256:")) or set(e.get("names") or []) & want
        ]
        for i in gone:
            del entries[i]
    return gone


def prepare_images(client: docker.DockerClient, settings: WorkerSettings) -> list[str]:
    """As the worker starts, before any job: the names in RAI_WORKER_IMAGES are published by the
    ids they have now (those of the previous start are replaced), rai's own busybox image if it is
    here, and an earlier release's names pulled through rai. Returns lines for the worker's log."""
    lines, work_dir = [], settings.work_dir
    with _record(work_dir) as entries:
        for image_id in [i for i, e in entries.items() if e.get("why") == NAMED]:
            del entries[image_id]
    for name in settings.worker_images:
        if name == "*":
            continue
        try:
            publish(client, work_dir, name, NAMED)
        except docker.errors.ImageNotFound:
            lines.append(
                f"RAI_WORKER_IMAGES names {name}, which is not on this host: it is not offered "
                "(pull it through rai, or load it and run: raiworker publish NAME)"
            )
    try:
        if is_rai_busybox(client.images.get(BUSYBOX_TAG)):
            publish(client, work_dir, BUSYBOX_TAG, BUSYBOX_WHY)
    except docker.errors.ImageNotFound:
        pass
    old = work_dir / OLD_PULLED_FILE
    if old.exists():  # by name then; their ids now, once
        for name in sorted(set(old.read_text().split())):
            with suppress(docker.errors.ImageNotFound):
                publish(client, work_dir, name, "pulled or loaded through rai (an earlier release's record, by name)")
        old.rename(work_dir / f"{OLD_PULLED_FILE}.migrated")
    return lines


def is_offered(image: Any, settings: WorkerSettings) -> bool:
    """Whether a job may run in this image (a docker Image): published here, by its id."""
    return "*" in settings.worker_images or image.id in published(settings.work_dir)


def offered(client: docker.DockerClient, settings: WorkerSettings) -> list[tuple[list[str], str, str]]:
    """(names, id, why) of each image on the host this worker offers."""
    every = "*" in settings.worker_images
    record = published(settings.work_dir)
    out = []
    for image in client.images.list():
        if image.id in record:
            out.append((_names(image), image.id, str(record[image.id].get("why", "published"))))
        elif every:
            out.append((_names(image), image.id, "RAI_WORKER_IMAGES=* (every image on this host)"))
    return [o for o in out if o[0]]  # an image without a name cannot be asked for


def offered_images(client: docker.DockerClient, settings: WorkerSettings) -> list[str]:
    """The name:tags of the images this worker offers to jobs, in ``normalize_image`` form."""
    return sorted({name for names, _, _ in offered(client, settings) for name in names})


def offer_line(client: docker.DockerClient, settings: WorkerSettings) -> str:
    """The worker's start-up line: each image it offers, its id and why; how many it does not."""
    shown = offered(client, settings)
    ids = {i for _, i, _ in shown}
    others = sum(1 for image in client.images.list() if image.id not in ids and image.tags)
    parts = [f"{', '.join(names)} ({image_id.removeprefix('sha256:')[:12]}: {why})" for names, image_id, why in sorted(shown)]
    line = f"offers {len(shown)} image(s) to jobs: {'; '.join(parts) or 'none'}"
    if others:
        line += f"; {others} other image(s) on this host are not offered (an operator publishes one: raiworker publish IMAGE)"
    return line


class Puller:
    """Carries out the pre-pull requests of the heartbeat replies, one at a time in a thread of its
    own, each request once; ``status`` (image -> "pulling" / "failed: why") goes in heartbeats."""

    def __init__(self, client: docker.DockerClient, server: ServerClient, scratch: Path, work_dir: Path):
        self.client, self.server, self.scratch, self.work_dir = client, server, scratch, work_dir
        self.status: dict[str, str] = {}
        self.tried: set[tuple[str, float]] = set()
        self.lock = threading.Lock()
        self.busy = False

    def want(self, requests: list[PullRequest]) -> None:
        fresh = [r for r in requests if (r.image, r.requested) not in self.tried]
        with self.lock:
            if not fresh or self.busy:
                return
            self.busy = True
        for r in fresh:
            self.tried.add((r.image, r.requested))
            self.status[r.image] = "pulling"
        threading.Thread(target=self._run, args=(fresh,), name="rai-image-pull", daemon=True).start()

    def _run(self, requests: list[PullRequest]) -> None:
        try:
            for req in requests:
                try:
                    image = self._one(req)  # the image this pull or load gave, not what its name leads to later
                    publish_image(self.work_dir, image, "loaded through rai" if req.blob else "pulled through rai", req.image)
                    self.status.pop(req.image, None)
                except Exception as exc:  # noqa: BLE001 - reported to staff, never fatal
                    log.warning("pulling image %s failed: %s", req.image, exc)
                    self.status[req.image] = f"failed: {str(exc).splitlines()[0][:300] if str(exc) else exc.__class__.__name__}"
        finally:
            with self.lock:
                self.busy = False

    def _one(self, req: PullRequest) -> Any:
        """Pull or load the image; the docker Image that gave (the one to publish)."""
        if req.blob is None:
            repo, _, tag = req.image.rpartition(":") if "@" not in req.image else (req.image, "", "")
            pulled = self.client.images.pull(repo or req.image, tag=tag or None)
            return pulled[0] if isinstance(pulled, list) else pulled
        self.scratch.mkdir(parents=True, exist_ok=True)
        tar = self.scratch / f"{req.blob}.tar"
        try:
            self.server.fetch_image(req.blob, tar)
            with tar.open("rb") as fh:
                loaded = self.client.images.load(fh)
        finally:
            tar.unlink(missing_ok=True)
        names = {normalize_image(t) for image in loaded for t in image.tags}
        if req.image not in names:
            raise ImageLoadFailed(f"the archive loaded {', '.join(sorted(names)) or 'no named image'}, not {req.image}")
        return next(image for image in loaded if req.image in {normalize_image(t) for t in image.tags})
