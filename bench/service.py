"""One `raid dev` for a benchmark: the whole service on this machine, in a temporary folder."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from raiserver.ops.launch import free_port


@dataclass
class Dev:
    url: str
    tmp: Path
    profile: Path
    env: dict[str, str]  # for client processes
    student: Path | None = None  # the raiclient command as a student installs it (student_client)

    def client(self, *args: str) -> list[str]:
        if self.student is not None:
            return [str(self.student), *args]
        return [sys.executable, "-m", "raiclient", *args]

    def student_client(self) -> None:
        """From now on ``client`` runs raiclient as students install it: its wheels from this
        server's /client/ page into a venv of its own (not the editable development install, whose
        import hooks cost every start ~15 ms; nor ``python -m``). The full client's dependencies
        are left out: its submit path imports none of them."""
        venv = self.tmp / "student"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "--python",
                str(venv / "bin" / "python"),
                "install",
                "-q",
                "--no-deps",
                "--no-index",
                "--find-links",
                f"{self.url}/client/",
                "raiclient",
                "raiprotocol",
            ],
            check=True,
        )
        self.student = venv / "bin" / "raiclient"

    def http(self) -> httpx.Client:
        from raiprotocol.profile import read_profile_file

        p = read_profile_file(self.profile)
        return httpx.Client(base_url=self.url, auth=(p.access_key, p.secret_key), timeout=60)


@contextmanager
def raid_dev(
    executor: str = "docker", extra_env: dict[str, str] | None = None, gpus: str = "none", server_workers: int = 1
) -> Iterator[Dev]:
    tmp = Path(tempfile.mkdtemp(prefix="rai-bench-"))
    port = free_port()
    env = {**os.environ, "HOME": str(tmp), **(extra_env or {})}
    raid = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "raiserver.ops.dev",
            "dev",
            "--data-dir",
            str(tmp / "data"),
            "--port",
            str(port),
            "--executor",
            executor,
            "--gpus",
            gpus,
            "--workers",
            str(server_workers),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(tmp / "raid.log", "wb"),  # noqa: SIM115 - the child process writes to it for its whole life
        start_new_session=True,
    )
    try:
        profile = tmp / "data" / "admin.rai_profile"
        dev = Dev(f"http://127.0.0.1:{port}", tmp, profile, {**env, "RAI_PROFILE": str(profile)})
        deadline = time.monotonic() + 90
        while not profile.exists() or not _worker_up(dev):
            if time.monotonic() > deadline or raid.poll() is not None:
                logs = "".join(f"--- {f.name}\n{f.read_text()[-1500:]}" for f in sorted((tmp / "data" / "logs").glob("*.log")))
                raise SystemExit(f"raid dev did not come up (exit {raid.poll()}):\n{(tmp / 'raid.log').read_text()[-3000:]}{logs}")
            time.sleep(0.3)
        yield dev
    finally:
        os.killpg(raid.pid, signal.SIGTERM)
        raid.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)


def _worker_up(dev: Dev) -> bool:
    try:
        with dev.http() as h:
            r = h.get("/api/v1/workers", timeout=2)
        return r.status_code == 200 and any(w["alive"] for w in r.json())
    except httpx.HTTPError:
        return False


def project(root: Path, image: str, commands: list[str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    cmds = "".join(f"    - {c!r}\n" for c in commands)
    (root / "rai_build.yml").write_text(f"rai:\n  version: 0.2\n  image: {image}\ncommands:\n  build:\n{cmds}")
    return root
