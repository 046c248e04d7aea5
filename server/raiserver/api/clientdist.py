"""The client as the server hands it out (GET /client/): made from the copy of raiclient and
raiprotocol installed beside the server, so a student always gets the client that speaks this
server's protocol.

- ``raiclient.pyz``: one file for any Python >= 3.10 with nothing installed (``python3
  raiclient.pyz submit``), made with the standard library's ``zipapp``. It holds raiclient,
  raiprotocol and the two pure-Python libraries its standard-library path needs (PyYAML without
  its C part, pathspec): every student command, completion and ``--help``. The admin commands need
  pydantic, which is compiled (no zip can carry it for every machine), so there they say how to
  install the full client (pipx, or pip in a venv).
- ``raiprotocol-V-py3-none-any.whl`` and ``raiclient-V-py3-none-any.whl``: the full client, for
  ``pipx install`` or pip in a venv (their dependencies come from the package index as usual).

Built once per server process, in memory, when first asked (tens of milliseconds). A server run
from a source tree (PYTHONPATH, no installed distributions) cannot make the wheels: it offers what
it can and says what it cannot, rather than failing the page.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import importlib.util
import io
import tempfile
import zipapp
import zipfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

PYZ = "raiclient.pyz"
# what the pyz holds: the packages the standard-library path imports, .py files only
PYZ_PACKAGES = ("raiclient", "raiprotocol", "yaml", "pathspec")
PYZ_MAIN = '''"""raiclient as one file: python3 raiclient.pyz submit"""
import sys

if sys.version_info < (3, 10):
    sys.exit(f"raiclient needs Python 3.10 or newer; this is {sys.version.split()[0]}")
from raiclient.entry import main

main()
'''


@dataclass(frozen=True)
class Download:
    name: str
    data: bytes
    media_type: str
    what: str


@dataclass(frozen=True)
class Offer:
    files: dict[str, Download]  # by name
    missing: tuple[str, ...]  # what could not be made here, each with its reason


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"the package {name} is not installed beside the server")
    return Path(next(iter(spec.submodule_search_locations)))


def _sources(name: str) -> list[tuple[str, Path]]:
    """(path inside the archive, file) for a package's Python files and typing marker."""
    root = _package_dir(name)
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".py", ".typed") and "__pycache__" not in p.parts)
    return [(f"{name}/{p.relative_to(root).as_posix()}", p) for p in files]


def _pyz(packages: tuple[str, ...]) -> bytes:
    with tempfile.TemporaryDirectory(prefix="rai-pyz-") as tmp:
        stage = Path(tmp) / "src"
        for package in packages:
            for arcname, path in _sources(package):
                dest = stage / arcname
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(path.read_bytes())
        (stage / "__main__.py").write_text(PYZ_MAIN)
        target = Path(tmp) / PYZ
        zipapp.create_archive(stage, target, interpreter="/usr/bin/env python3", compressed=True)
        return target.read_bytes()


def _record_line(arcname: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{len(data)}"


def _wheel(dist: str) -> tuple[str, bytes]:
    """A pure-Python wheel of an installed distribution (its package's files, its metadata)."""
    meta = importlib.metadata.metadata(dist)
    version = meta["Version"]
    info = f"{dist}-{version}.dist-info"
    lines = ["Metadata-Version: 2.1", f"Name: {dist}", f"Version: {version}"]
    for key in ("Summary", "Requires-Python"):
        lines += [f"{key}: {value}" for value in meta.get_all(key) or []]
    lines += [f"Requires-Dist: {req}" for req in importlib.metadata.requires(dist) or []]
    members: list[tuple[str, bytes]] = [(arc, path.read_bytes()) for arc, path in _sources(dist)]
    members.append((f"{info}/METADATA", ("\n".join(lines) + "\n").encode()))
    members.append((f"{info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: raiserver\nRoot-Is-Purelib: true\nTag: py3-none-any\n"))
    scripts = [ep for ep in importlib.metadata.distribution(dist).entry_points if ep.group == "console_scripts"]
    if scripts:
        members.append(
            (f"{info}/entry_points.txt", ("[console_scripts]\n" + "".join(f"{ep.name} = {ep.value}\n" for ep in scripts)).encode())
        )
    record = "".join(_record_line(arc, data) + "\n" for arc, data in members) + f"{info}/RECORD,,\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as whl:
        for arc, data in [*members, (f"{info}/RECORD", record.encode())]:
            whl.writestr(arc, data)
    return f"{dist}-{version}-py3-none-any.whl", buf.getvalue()


def offer(dists: tuple[str, ...] = ("raiprotocol", "raiclient"), pyz_packages: tuple[str, ...] = PYZ_PACKAGES) -> Offer:
    """Every file GET /client/ can offer, and a line for each it cannot."""
    files: list[Download] = []
    missing: list[str] = []
    try:
        what = "one file, any Python >= 3.10, every student command: python3 raiclient.pyz submit"
        files.append(Download(PYZ, _pyz(pyz_packages), "application/zip", what))
    except RuntimeError as exc:
        missing.append(f"{PYZ}: {exc}")
    for dist in dists:
        try:
            name, data = _wheel(dist)
        except (importlib.metadata.PackageNotFoundError, RuntimeError):
            missing.append(f"the {dist} wheel: the distribution {dist} is not installed beside the server")
            continue
        files.append(Download(name, data, "application/zip", "wheel of the full client, for pipx or pip in a venv"))
    return Offer({f.name: f for f in files}, tuple(missing))


@cache
def downloads() -> Offer:
    """The server's own offer, made once per process."""
    return offer()
