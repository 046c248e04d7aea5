"""A PostgreSQL server of a test's own, that the test may kill and start again: the machine's shared
one (127.0.0.1:5432) serves other tests and work, so it is never stopped. Made with the installed
PostgreSQL's initdb in a temporary folder, on a free port, trust auth on loopback; as root, its
commands run as the ``postgres`` user (PostgreSQL refuses to run as root)."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from .service import free_port


def _bindir() -> Path | None:
    """The newest installed PostgreSQL's programs (Debian keeps them out of PATH)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(Path(p).parent.parent.name.split(".")[0]))
    if found:
        return Path(found[-1]).parent
    pg_ctl = shutil.which("pg_ctl")
    return Path(pg_ctl).parent if pg_ctl else None


class PrivatePostgres:
    def __init__(self) -> None:
        bindir = _bindir()
        if bindir is None:
            if os.environ.get("RAI_REQUIRE_POSTGRES") == "1":
                pytest.fail("PostgreSQL's programs (initdb, pg_ctl) are not installed")
            pytest.skip("PostgreSQL's programs (initdb, pg_ctl) are not installed")
        self.bindir = bindir
        # not under pytest's tmp_path: its folders are root's alone, and the server runs as postgres
        self.root = Path(tempfile.mkdtemp(prefix="rai-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
        self.start()

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, program: str, *args: str, check: bool = True) -> None:
        as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        res = subprocess.run([*as_postgres, str(self.bindir / program), *args], capture_output=True, text=True, timeout=60)
        assert res.returncode == 0 or not check, f"{program} {' '.join(args)}: {res.stdout}{res.stderr}"

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.root / "log"), "-w", "start")

    def kill(self) -> None:
        """As a crash: every backend ends at once, nothing is flushed (recovery runs at the next start)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def remove(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop", check=False)  # already stopped is fine
        shutil.rmtree(self.root, ignore_errors=True)
