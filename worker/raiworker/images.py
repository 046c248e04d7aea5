"""Job images on this worker: what it holds (advertised in heartbeats), pre-pulls staff ask
for, and images built on the spot for hosts that reach no registry.

``rai/busybox`` is made from the host's statically linked busybox (Debian: busybox-static) with
``docker import``: a shell and the usual tools in about 2 MB, enough for examples/hello and tests.
"""

from __future__ import annotations

import io
import logging
import shutil
import subprocess
import tarfile
import threading
import time
from pathlib import Path

import docker

from raiprotocol.models import PullRequest
from raiprotocol.spec import normalize_image

from .errors import ImageLoadFailed
from .server import ServerClient

log = logging.getLogger("raiworker")

BUSYBOX_TAG = "rai/busybox:latest"
# Images a worker offers to jobs: those the course published (this label, set in the image's
# Dockerfile), those the operator names (RAI_WORKER_IMAGES; "*" for every image on the host) and
# those staff had it pull or load through rai. Any other image on the host (a staff-only image
# built there, a base image) is neither advertised nor run.
COURSE_LABEL = "rai.course"
PULLED_FILE = "rai-images"  # in the work folder: the images pulled or loaded through rai


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


def ensure_busybox_image(client: docker.DockerClient, tag: str = BUSYBOX_TAG) -> bool:
    """Import the image unless it exists (with the course label); False when the host has no static busybox."""
    try:
        if COURSE_LABEL in (client.images.get(tag).labels or {}):
            return True
    except docker.errors.ImageNotFound:
        pass
    found = shutil.which("busybox")
    if not found:
        return False
    repo, _, version = tag.partition(":")
    client.api.import_image_from_data(_busybox_rootfs(Path(found)), repository=repo, tag=version or "latest",
                                      changes=['CMD ["/bin/sh"]', f'LABEL {COURSE_LABEL}="true"'])
    return True


def named_images(named: list[str], work_dir: Path) -> set[str]:
    """The names the operator gave (RAI_WORKER_IMAGES) and the images pulled or loaded through rai."""
    names = {normalize_image(n) if n != "*" else n for n in named}
    try:
        names |= {normalize_image(n) for n in (work_dir / PULLED_FILE).read_text().split()}
    except OSError:
        pass
    return names


def is_offered(labels: dict | None, tags: list[str], named: set[str]) -> bool:
    return "*" in named or COURSE_LABEL in (labels or {}) or bool({normalize_image(t) for t in tags} & named)


def offered_images(client: docker.DockerClient, named: set[str]) -> list[str]:
    """The name:tags of the images this worker offers to jobs, in ``normalize_image`` form."""
    return sorted({normalize_image(tag) for image in client.images.list()
                   if is_offered(image.labels, image.tags, named) for tag in image.tags})


def remember_pulled(work_dir: Path, image: str) -> None:
    """Staff asked for this image through rai: it is offered from now on."""
    work_dir.mkdir(parents=True, exist_ok=True)
    with (work_dir / PULLED_FILE).open("a") as fh:
        fh.write(normalize_image(image) + "\n")


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
                    self._one(req)
                    remember_pulled(self.work_dir, req.image)
                    self.status.pop(req.image, None)
                except Exception as exc:  # noqa: BLE001 - reported to staff, never fatal
                    log.warning("pulling image %s failed: %s", req.image, exc)
                    self.status[req.image] = f"failed: {str(exc).splitlines()[0][:300] if str(exc) else exc.__class__.__name__}"
        finally:
            with self.lock:
                self.busy = False

    def _one(self, req: PullRequest) -> None:
        if req.blob is None:
            repo, _, tag = req.image.rpartition(":") if "@" not in req.image else (req.image, "", "")
            self.client.images.pull(repo or req.image, tag=tag or None)
            return
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
