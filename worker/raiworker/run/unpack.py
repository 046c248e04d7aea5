"""Unpack a student's project without the worker's root rights.

The worker runs as root (it drives Docker and the GPUs); the archive is the student's. Even with
every check in ``raiprotocol.archive``, the unpacking itself happens in a child process that has
dropped to the job's user (the container's uid), into a folder that user owns: a mistake in the
checks, or a bug in Python's tarfile, can then write nothing that user could not.
"""

from __future__ import annotations

import gzip  # noqa: F401 - imported here: the unprivileged child may not be able to read the import path
import os
import zlib  # noqa: F401
from pathlib import Path

from raiprotocol.archive import ArchiveError, extract_archive

from ..errors import UnpackFailed


def unpack(archive: Path, dest: Path, user: str) -> None:
    """``extract_archive`` as ``user`` ("uid:gid") when running as root; ArchiveError as it says."""
    dest.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        extract_archive(archive, dest)
        return
    uid_s, _, gid_s = user.partition(":")
    uid, gid = int(uid_s), int(gid_s or uid_s)
    os.chown(dest, uid, gid)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop every right, unpack, report
        code = 0
        try:
            os.close(read_end)
            source = archive.open("rb")  # opened as root; the folders above may be closed to the user
            os.chdir(dest)
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
            extract_archive(source, Path("."))
        except ArchiveError as exc:
            os.write(write_end, str(exc).encode()[:4000])
            code = 3
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            os.write(write_end, f"{exc.__class__.__name__}: {exc}".encode()[:4000])
            code = 4
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as fh:
        message = fh.read().decode("utf-8", "replace")
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code == 3:
        raise ArchiveError(message)
    if code != 0:
        raise UnpackFailed(f"unpacking the project failed ({message or f'exit {code}'})")
