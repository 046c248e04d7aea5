"""Archives: .raiignore on the way out; on the way in, every unsafe entry refused by name."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest
from helpers import tar_gz

from raiclient.pack import pack_project
from raiprotocol.archive import ArchiveError, ArchiveLimits, extract_archive, inspect_archive


def tar_with(tmp_path: Path, *members: tuple[tarfile.TarInfo, bytes | None]) -> Path:
    path = tmp_path / "a.tar.gz"
    path.write_bytes(tar_gz(list(members), spec=b"rai:\n  image: x\ncommands:\n  build: [echo]\n"))
    return path


def entry(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    return info


def test_pack_applies_raiignore(tmp_path):
    proj = tmp_path / "p"
    (proj / "scratch").mkdir(parents=True)
    (proj / ".git").mkdir()
    (proj / "rai_build.yml").write_text("x")
    (proj / "main.cu").write_text("x")
    (proj / "main.o").write_text("x")
    (proj / "scratch" / "big.bin").write_text("x")
    (proj / ".git" / "HEAD").write_text("x")
    (proj / ".raiignore").write_text("*.o\nscratch/\n")
    packed = pack_project(proj)
    with tarfile.open(packed.path) as tar:
        names = sorted(tar.getnames())
    assert names == [".raiignore", "main.cu", "rai_build.yml"]
    assert packed.ignore_applied and packed.files == 3


@pytest.mark.parametrize(
    "member, message",
    [
        ((entry("../../x"), b"x"), "entry '../../x': '..' in paths is not allowed"),
        ((entry("/etc/cron.d/x"), b"x"), "entry '/etc/cron.d/x': absolute paths are not allowed"),
        (
            (entry("passwd", tarfile.SYMTYPE, "/etc/passwd"), None),
            "entry 'passwd': symlink to an absolute path (/etc/passwd) is not allowed",
        ),
        ((entry("up", tarfile.SYMTYPE, "../../etc"), None), "entry 'up': symlink points outside the project (../../etc)"),
        ((entry("hl", tarfile.LNKTYPE, "../outside"), None), "entry 'hl': hard link points outside the project (../outside)"),
        ((entry("dev", tarfile.CHRTYPE), None), "entry 'dev': device files, FIFOs and other special files are not allowed"),
        ((entry("fifo", tarfile.FIFOTYPE), None), "entry 'fifo': device files, FIFOs and other special files are not allowed"),
        ((entry("a\nb"), b"x"), "entry 'a\\nb': name contains a control character"),
    ],
)
def test_unsafe_entries_are_refused_by_name(tmp_path, member, message):
    with pytest.raises(ArchiveError) as exc:
        inspect_archive(tar_with(tmp_path, member))
    assert str(exc.value) == message


def test_links_inside_the_tree_are_fine_and_extract(tmp_path):
    path = tar_with(tmp_path, (entry("data.txt"), b"hello"), (entry("alias.txt", tarfile.SYMTYPE, "data.txt"), None))
    info = extract_archive(path, tmp_path / "out")
    assert info.spec_bytes.startswith(b"rai:")
    assert (tmp_path / "out" / "alias.txt").read_text() == "hello"


def test_caps_on_count_size_and_ratio(tmp_path):
    path = tar_with(tmp_path, *[(entry(f"f{i}"), b"") for i in range(20)])
    with pytest.raises(ArchiveError, match="more than 10 entries"):
        inspect_archive(path, ArchiveLimits(max_files=10))
    zeros = tar_with(tmp_path, (entry("zeros"), b"\0" * (4 * 1024**2)))
    with pytest.raises(ArchiveError, match="expands more than"):
        inspect_archive(zeros, ArchiveLimits(ratio_floor_bytes=1024**2, max_ratio=50))
    with pytest.raises(ArchiveError, match="unpacks to more than"):
        inspect_archive(zeros, ArchiveLimits(max_unpacked_bytes=1024**2))


def test_garbage_truncated_and_empty(tmp_path):
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"this is not a tarball at all")
    with pytest.raises(ArchiveError, match="not a readable .tar.gz"):
        inspect_archive(junk)
    good = tar_with(tmp_path, (entry("big"), bytes(range(256)) * 4000))
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(ArchiveError, match="not a readable .tar.gz"):
        inspect_archive(cut)
    empty = tmp_path / "empty.tar.gz"
    empty.write_bytes(b"")
    with pytest.raises(ArchiveError):
        inspect_archive(empty)


# -- issue 34, item 5: a build folder's hard links count once, and packing has a deadline -------------


def _links_folder(tmp_path: Path, size: int, links: int) -> Path:
    import os

    build = tmp_path / "build"
    build.mkdir()
    (build / "big").write_bytes(b"x" * size)
    for i in range(links):
        os.link(build / "big", build / f"link{i}")
    return build


def test_pack_counts_a_hard_linked_file_once(tmp_path):
    """15,000 hard links to one 200 MB file were counted (and copied) 15,000 times."""
    from raiprotocol.archive import pack_directory

    build = _links_folder(tmp_path, 1024**2, 300)  # 300 MiB if each link counted
    out = tmp_path / "build.tar.gz"
    assert pack_directory(build, out, max_bytes=2 * 1024**2, max_entries=1000) == 301
    with tarfile.open(out) as tar:
        members = tar.getmembers()
    assert sum(m.isreg() for m in members) == 1 and sum(m.islnk() for m in members) == 300
    assert out.stat().st_size < 64 * 1024


def test_unpacking_hard_links_makes_links_not_copies(tmp_path):
    from raiprotocol.archive import pack_directory, safe_extract

    build = _links_folder(tmp_path, 1024**2, 300)
    out = tmp_path / "build.tar.gz"
    pack_directory(build, out)
    dest = tmp_path / "back"
    dest.mkdir()
    with tarfile.open(out) as tar:
        written = safe_extract(tar, dest, max_bytes=2 * 1024**2, max_entries=1000)  # 300 MiB as copies: over
    assert written == 1024**2
    assert (dest / "link299").stat().st_ino == (dest / "big").stat().st_ino
    assert (dest / "link7").read_bytes() == b"x" * 1024**2


def test_a_hard_link_is_never_made_to_something_outside(tmp_path):
    """A link entry whose target is a symlink (or missing) is left out, as before."""
    import io

    from raiprotocol.archive import safe_extract

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.addfile(entry("out", tarfile.SYMTYPE, "../outside"))
        tar.addfile(entry("hl", tarfile.LNKTYPE, "out"))
        tar.addfile(entry("hl2", tarfile.LNKTYPE, "missing"))
    (tmp_path / "outside").write_text("secret")
    dest = tmp_path / "d"
    dest.mkdir()
    buf.seek(0)
    with tarfile.open(fileobj=buf) as tar:
        safe_extract(tar, dest)
    assert not (dest / "hl").exists() and not (dest / "hl2").exists()


def test_packing_stops_at_its_deadline_and_leaves_nothing(tmp_path):
    import time

    from raiprotocol.archive import OverLimit, TooSlow, pack_directory

    build = tmp_path / "build"
    build.mkdir()
    (build / "f").write_bytes(b"y" * 1024)
    out = tmp_path / "b.tar.gz"
    with pytest.raises(TooSlow, match="more than packing can do in"):
        pack_directory(build, out, deadline=time.monotonic() - 1)
    assert not out.exists()
    assert issubclass(TooSlow, OverLimit)
    assert pack_directory(build, out, deadline=time.monotonic() + 60) == 1  # in time: packed


def test_pack_skips_sockets(tmp_path):
    import socket

    from raiprotocol.archive import pack_directory

    build = tmp_path / "b"
    build.mkdir()
    (build / "f").write_text("x")
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(build / "sock"))
    try:
        assert pack_directory(build, tmp_path / "o.tar.gz") == 2
    finally:
        s.close()
    with tarfile.open(tmp_path / "o.tar.gz") as tar:
        assert tar.getnames() == ["f"]
