"""Issue 25: the operator's `docker-compose.yml`, started for real with Debian's docker-compose.

No registry is reachable here, so the stand-ins of images/standins (Debian root filesystems with
the same interface) take the place of python, redis and postgres through the file's own image
variables. The file itself is used as written, with one transformation for this machine: every
service on the host's network, bound to 127.0.0.1 on free ports (bridge networks get private
addresses; nothing may go anywhere but loopback), and no GPU reservation for the worker.
Then what an operator and a student do: create users as the README says, submit from the host
and watch the lines come, restart every service, `down` and `up` again, and a second worker host
joining with only the server's URL and the secrets file."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import httpx
import pytest
import yaml
from helpers import ROOT, make_project

from raiserver.ops.launch import free_port

pytestmark = [
    pytest.mark.timeout(1500),
    pytest.mark.skipif(
        shutil.which("docker-compose") is None and os.environ.get("RAI_REQUIRE_DOCKER") != "1", reason="docker-compose not installed"
    ),
]

STANDINS = {
    "RAI_PYTHON_IMAGE": "rai-standin/python:3.11",
    "RAI_REDIS_IMAGE": "rai-standin/redis:7",
    "RAI_POSTGRES_IMAGE": "rai-standin/postgres:15",
}


def on_loopback(spec: dict, ports: dict[str, int], work: Path) -> dict:
    """docker-compose.yml as this machine must run it: host network, 127.0.0.1, free ports."""
    s = spec["services"]
    for svc in s.values():
        svc["network_mode"] = "host"
        svc.pop("ports", None)
    s["secrets"]["build"]["network"] = "host"  # the build reaches the package archives
    s["secrets"]["command"] = [a.replace("redis:6379", f"127.0.0.1:{ports['redis']}") for a in s["secrets"]["command"]]
    s["redis"]["command"][-1] += f" --port {ports['redis']} --bind 127.0.0.1"
    s["postgres"]["environment"].update(PGPORT=str(ports["postgres"]), POSTGRES_LISTEN="127.0.0.1")
    s["server"]["command"] = [{"0.0.0.0": "127.0.0.1", "8000": str(ports["server"])}.get(a, a) for a in s["server"]["command"]]
    env = s["server"]["environment"]
    env["DATABASE_URL"] = env["DATABASE_URL"].replace("@postgres:5432", f"@127.0.0.1:{ports['postgres']}")
    env.update(RAI_PUBLIC_URL=f"http://127.0.0.1:{ports['server']}", RAI_HEARTBEAT_SECONDS="1", RAI_WORKER_DEAD_AFTER="6")
    w = s["worker"]
    w.pop("deploy", None)  # no GPU here
    w["environment"].update(
        RAI_SERVER_URL=f"http://127.0.0.1:{ports['server']}",
        RAI_GPUS="none",
        RAI_METRICS_PORT="0",
        RAI_WORK_DIR=str(work),
        RAI_HEARTBEAT_SECONDS="1",
        RAI_WORKER_DEAD_AFTER="6",
    )
    w["volumes"] = [v.replace("/var/lib/rai-worker:/var/lib/rai-worker", f"{work}:{work}") for v in w["volumes"]]
    return spec


class Stack:
    def __init__(self, root: Path):
        self.root = root
        self.project = f"raici{uuid.uuid4().hex[:6]}"
        self.ports = {name: free_port() for name in ("redis", "postgres", "server")}
        self.url = f"http://127.0.0.1:{self.ports['server']}"
        work = root / "worker"
        work.mkdir(parents=True)
        spec = on_loopback(yaml.safe_load((ROOT / "docker-compose.yml").read_text()), self.ports, work)
        self.file = root / "docker-compose.ci.yml"
        self.file.write_text(yaml.safe_dump(spec, sort_keys=False))
        self.env = {**os.environ, **STANDINS}

    def compose(
        self, *args: str, timeout: float = 600, check: bool = True, project: str | None = None, file: Path | None = None
    ) -> subprocess.CompletedProcess:
        res = subprocess.run(
            ["docker-compose", "-p", project or self.project, "-f", str(file or self.file), "--project-directory", str(ROOT), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and res.returncode != 0:
            raise AssertionError(f"docker-compose {' '.join(args)} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
        return res

    def healthy(self, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1)
        raise AssertionError(f"the server did not answer in {timeout} s:\n{self.compose('logs', '--tail=60', check=False).stdout}")

    def add_user(self, name: str, role: str) -> Path:
        """As the README tells an operator: raiserver add-user in the server's container."""
        out = self.compose("exec", "-T", "server", "raiserver", "add-user", name, "--role", role, "--server-url", self.url).stdout
        path = self.root / f"{name}.profile"
        path.write_text(out)
        return path

    def workers_alive(self, profile: Path, n: int, timeout: float = 90) -> list[dict]:
        from raiprotocol.profile import read_profile_file

        p = read_profile_file(profile)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                alive = [
                    w for w in httpx.get(f"{self.url}/api/v1/workers", auth=(p.access_key, p.secret_key), timeout=5).json() if w["alive"]
                ]
                if len(alive) >= n:
                    return alive
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(1)
        raise AssertionError(f"{n} live worker(s) expected:\n{self.compose('logs', '--tail=40', 'worker', check=False).stdout}")


def client(stack: Stack, profile: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    import sys

    env = {**os.environ, "RAI_PROFILE": str(profile), "PYTHONUNBUFFERED": "1"}
    env.pop("RAI_SERVER", None)
    return subprocess.run([sys.executable, "-m", "raiclient", *args], env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def stack(tmp_path_factory, docker_engine):
    subprocess.run(["bash", str(ROOT / "images/standins/build.sh")], check=True, capture_output=True, timeout=900)
    st = Stack(tmp_path_factory.mktemp("compose"))
    for f in (ROOT / "docker-compose.yml", st.file):  # both files parse
        assert (
            subprocess.run(
                ["docker-compose", "-f", str(f), "--project-directory", str(ROOT), "config", "-q"], env=st.env, capture_output=True
            ).returncode
            == 0
        )
    st.compose("build", timeout=900)
    st.compose("up", "-d", timeout=300)
    try:
        st.healthy()
        yield st
    finally:
        st.compose("down", "-v", "--remove-orphans", check=False, timeout=300)


def test_an_operator_starts_the_stack_and_a_student_runs_a_job(stack):
    admin = stack.add_user("admin", "admin")
    student = stack.add_user("alice", "student")
    stack.workers_alive(admin, 1)
    res = client(stack, student, "submit", "-p", str(ROOT / "examples/hello"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "step 3 of 3" in res.stdout and "Job succeeded" in res.stdout
    assert httpx.get(f"{stack.url}/login", timeout=10).status_code == 200  # the web view answers
    stack.first_job = re.search(r"Job (\S+) queued", res.stdout).group(1)


def test_the_readmes_backup_of_the_compose_stack_restores_into_a_fresh_one(stack, tmp_path):
    """Issue 37: the backup steps did not fit the compose deployment (data in a named volume,
    PostgreSQL unpublished, its password unknown). The README's commands, run as written with
    `compose` for the operator's spelling: dump, tar of the volume and the secrets file from the
    running stack; then a fresh project (empty volumes) restored from them serves the same users,
    keys, jobs, logs and build folders."""
    import sys

    def sh(st: Stack, command: str, project: str | None = None) -> subprocess.CompletedProcess:
        """A README line, with `compose` meaning this stack's docker-compose."""
        compose = f"docker-compose -p {project or st.project} -f {st.file} --project-directory {ROOT}"
        res = subprocess.run(
            [
                "bash",
                "-c",
                f"set -e -o pipefail; umask 077; cd {tmp_path}; "
                + command.replace(
                    "compose ",
                    compose + " ",
                ),
            ],
            env=st.env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert res.returncode == 0, f"{command}\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
        return res

    # back up (README "Back up", compose)
    sh(stack, "compose exec -T postgres pg_dump -U rai --format=custom --no-owner rai > rai.dump")
    sh(stack, "compose exec -T server tar -C /var/lib/rai -czf - . > rai-data.tar.gz")
    sh(stack, "compose exec -T server cat /run/rai/secrets.env > secrets.env")
    for name in ("rai.dump", "rai-data.tar.gz", "secrets.env"):
        f = tmp_path / name
        assert f.stat().st_size > 0 and f.stat().st_mode & 0o077 == 0, name  # readable by the operator alone
    # restore into a fresh stack (README "Restore", compose): new project, empty volumes
    fresh = Stack(tmp_path / "fresh")
    try:
        sh(fresh, "compose up -d postgres")
        sh(fresh, "until compose exec -T postgres pg_isready -U rai -d rai; do sleep 1; done")
        sh(fresh, "compose exec -T postgres pg_restore -U rai --no-owner --dbname rai < rai.dump")
        sh(fresh, "compose run --rm -T --no-deps --entrypoint sh server -c 'tar -C /var/lib/rai -xzf -' < rai-data.tar.gz")
        sh(fresh, "compose run --rm -T --no-deps --entrypoint sh secrets -c 'umask 077; cat > /run/rai/secrets.env' < secrets.env")
        sh(fresh, "compose up -d")
        fresh.healthy()
        env = {**os.environ, "RAI_PROFILE": str(stack.root / "alice.profile"), "RAI_SERVER": fresh.url}
        log = subprocess.run(
            [sys.executable, "-m", "raiclient", "logs", stack.first_job], env=env, capture_output=True, text=True, timeout=120
        )
        assert log.returncode == 0 and "step 3 of 3" in log.stdout, log.stdout + log.stderr  # her keys, her job, its log
        got = subprocess.run(
            [sys.executable, "-m", "raiclient", "download", stack.first_job, "-o", str(tmp_path / "b.tar.gz")],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert got.returncode == 0 and (tmp_path / "b.tar.gz").stat().st_size > 0, got.stdout + got.stderr
        with (tmp_path / "secrets.env").open() as fh:  # the workers' token and the sessions' secret came back too
            assert fresh.compose("exec", "-T", "server", "cat", "/run/rai/secrets.env").stdout == fh.read()
    finally:
        fresh.compose("down", "-v", "--remove-orphans", check=False, timeout=300)


def test_restarts_and_down_up_keep_everything(stack, tmp_path):
    admin, student = stack.root / "admin.profile", stack.root / "alice.profile"
    for service in ("redis", "postgres", "server", "worker"):
        stack.compose("restart", service, timeout=180)
    stack.healthy()
    stack.workers_alive(admin, 1)
    res = client(stack, student, "submit", "-p", str(make_project(tmp_path / "p", ["echo after the restarts"], image="rai/busybox:latest")))
    assert res.returncode == 0 and "after the restarts" in res.stdout, res.stdout + res.stderr
    stack.compose("down", timeout=300)  # the named volumes stay
    stack.compose("up", "-d", timeout=300)
    stack.healthy()
    log = client(stack, student, "logs", stack.first_job)
    assert log.returncode == 0 and "step 3 of 3" in log.stdout, log.stdout + log.stderr  # users, jobs and logs kept
    assert client(stack, student, "download", stack.first_job, "-o", str(tmp_path / "b.tar.gz")).returncode == 0


def test_a_second_worker_host_joins_with_the_url_and_the_secrets_file(stack, tmp_path):
    """Another machine: a compose project with only a worker, the server's URL and a copy of the
    secrets file. Its name is its container's host name (no setting); jobs spread over both, and a
    job whose worker is killed runs again on the other."""
    admin = stack.root / "admin.profile"
    secrets = tmp_path / "secrets.env"
    secrets.write_text(stack.compose("exec", "-T", "server", "cat", "/run/rai/secrets.env").stdout)
    spec = yaml.safe_load(stack.file.read_text())
    worker = spec["services"]["worker"]
    worker.pop("depends_on", None)
    worker["volumes"] = [v for v in worker["volumes"] if not v.startswith("secrets:")] + [f"{secrets}:/run/rai/secrets.env:ro"]
    work2 = tmp_path / "worker2"
    work2.mkdir()
    worker["environment"]["RAI_WORK_DIR"] = str(work2)
    worker["volumes"] = [v.replace(str(stack.root / "worker"), str(work2)) for v in worker["volumes"]]
    second = tmp_path / "worker-host.yml"
    second.write_text(
        yaml.safe_dump(
            {"version": spec.get("version", "3.8"), "services": {"worker": worker}}
            if "version" in spec
            else {"services": {"worker": worker}},
            sort_keys=False,
        )
    )
    project2 = stack.project + "w2"
    stack.compose("up", "-d", project=project2, file=second, timeout=300)
    from raiprotocol.profile import read_profile_file

    p = read_profile_file(admin)

    def job(job_id: str) -> dict:
        return httpx.get(f"{stack.url}/api/v1/jobs/{job_id}", auth=(p.access_key, p.secret_key), timeout=10).json()

    try:
        names = {w["name"] for w in stack.workers_alive(admin, 2)}
        assert len(names) == 2, names
        jobs = []
        for i in range(4):
            proj = make_project(tmp_path / f"j{i}", ["sleep 4", f"echo job {i} done"], image="rai/busybox:latest")
            res = client(stack, admin, "submit", "-p", str(proj), "--detach")
            assert res.returncode == 0, res.stdout + res.stderr
            jobs.append(re.search(r"Job (\S+) queued", res.stdout).group(1))
        for job_id in jobs:
            out = client(stack, admin, "logs", job_id, "--follow")
            assert " done" in out.stdout, out.stdout + out.stderr
        assert {job(j)["worker"] for j in jobs} == names  # spread over both hosts
        # a long job, and the worker holding it killed: it runs again on the other
        proj = make_project(tmp_path / "long", ["sleep 8", "echo survived"], image="rai/busybox:latest")
        res = client(stack, admin, "submit", "-p", str(proj), "--detach")
        long_job = re.search(r"Job (\S+) queued", res.stdout).group(1)
        holder = None
        for _ in range(120):
            holder = job(long_job).get("worker")
            if holder:
                break
            time.sleep(0.25)
        # each worker named itself, in its work folder
        names_at = {
            (stack.root / "worker" / "name").read_text().strip(): f"{stack.project}_worker_1",
            (work2 / "name").read_text().strip(): f"{project2}_worker_1",
        }
        assert set(names_at) == names
        victim = names_at[holder]
        subprocess.run(["docker", "kill", victim], check=True, capture_output=True)
        out = client(stack, admin, "logs", long_job, "--follow", timeout=240)
        assert "survived" in out.stdout, out.stdout + out.stderr
        final = job(long_job)
        assert final["state"] == "succeeded" and final["worker"] != holder, final
    finally:
        stack.compose("down", "-v", project=project2, file=second, check=False, timeout=300)


def test_a_crashed_server_or_worker_container_comes_back_and_the_job_ends_definite(stack, tmp_path):
    """The container's main process killed from the host (a crash, not `docker stop`): the
    restart policy starts it again; the worker, under the name its work folder keeps, gives back
    the run it lost and the job runs again; the student's client follows through the server's
    restart and exits with the job's status."""
    import signal
    import sys

    admin = stack.root / "admin.profile"
    from raiprotocol.profile import read_profile_file

    p = read_profile_file(admin)

    def crash(service: str) -> None:
        pid = subprocess.run(
            ["docker", "inspect", "-f", "{{.State.Pid}}", f"{stack.project}_{service}_1"], capture_output=True, text=True, check=True
        ).stdout.strip()
        os.kill(int(pid), signal.SIGKILL)

    stack.compose("up", "-d", "worker")  # the previous test may have killed this one (`docker kill`: it stays down)
    stack.workers_alive(admin, 1)

    def restarts() -> dict[str, int]:
        return {
            s: int(
                subprocess.run(
                    ["docker", "inspect", "-f", "{{.RestartCount}}", f"{stack.project}_{s}_1"], capture_output=True, text=True
                ).stdout.strip()
                or 0
            )
            for s in ("server", "worker")
        }

    before = restarts()
    proj = make_project(tmp_path / "crash", ["echo started", "sleep 6", "echo finished"], image="rai/busybox:latest")
    env = {**os.environ, "RAI_PROFILE": str(admin), "PYTHONUNBUFFERED": "1"}
    follow = subprocess.Popen(
        [sys.executable, "-m", "raiclient", "submit", "-p", str(proj)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    seen = ""
    while "started" not in seen.splitlines()[-1:] and follow.poll() is None:
        seen += follow.stdout.readline()
    job_id = re.search(r"Job (\S+) queued", seen).group(1)
    crash("worker")
    time.sleep(1)
    crash("server")
    out, _ = follow.communicate(timeout=240)
    out = seen + out
    assert follow.returncode == 0 and "finished" in out, out
    assert "the run it held was lost; the job goes back in the queue" in out or "stopped answering" in out, out
    final = httpx.get(f"{stack.url}/api/v1/jobs/{job_id}", auth=(p.access_key, p.secret_key), timeout=10).json()
    assert final["state"] == "succeeded", final
    after = restarts()
    assert after == {s: before[s] + 1 for s in before}, (before, after)  # the restart policy brought each back
