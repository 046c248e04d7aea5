"""Job images built on the spot, for hosts that reach no registry.

``rai/busybox`` is made from the host's statically linked busybox (Debian: busybox-static) with
``docker import``: a shell and the usual tools in about 2 MB, enough for examples/hello and tests.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

import docker

BUSYBOX_TAG = "rai/busybox:latest"


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
    """Import the image unless it exists; False when the host has no static busybox."""
    try:
        client.images.get(tag)
        return True
    except docker.errors.ImageNotFound:
        pass
    found = shutil.which("busybox")
    if not found:
        return False
    repo, _, version = tag.partition(":")
    client.api.import_image_from_data(_busybox_rootfs(Path(found)), repository=repo, tag=version or "latest",
                                      changes=['CMD ["/bin/sh"]'])
    return True
