"""Projects and build files as students write them, for tests to submit."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

from .service import BUSYBOX

GOOD_SPEC = b'rai:\n  version: 0.2\n  image: rai/busybox:latest\ncommands:\n  build:\n    - "echo healthy"\n'


def make_project(root: Path, commands: list[str], image: str = BUSYBOX, files: dict[str, str] | None = None, extra: str = "") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    cmds = "\n".join(f"    - {json.dumps(c)}" for c in commands)
    header = f"rai:\n  version: 0.2\n  image: {image}\n"
    (root / "rai_build.yml").write_text(header + extra + "commands:\n  build:\n" + cmds + "\n")
    for name, text in (files or {}).items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def tar_gz(members: list[tuple[tarfile.TarInfo, bytes | None]], spec: bytes | None = GOOD_SPEC) -> bytes:
    """A project archive as the server receives it: the build file, then members as given
    (data None: no body, as for links and folders)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.GNU_FORMAT) as tar:
        if spec is not None:
            info = tarfile.TarInfo("rai_build.yml")
            info.size = len(spec)
            tar.addfile(info, io.BytesIO(spec))
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def build_file(commands: list[str], extra: str = "") -> bytes:
    cmds = "".join(f"    - {json.dumps(c)}\n" for c in commands)
    return f"rai:\n  version: 0.2\n  image: rai/busybox:latest\n{extra}commands:\n  build:\n{cmds}".encode()
