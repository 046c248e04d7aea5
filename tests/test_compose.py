"""Issue 25: the operator's `docker-compose.yml`, started for real with Debian's docker-compose.

No registry is reachable here, so the stand-ins of images/standins (Debian root filesystems with
the same interface) take the place of python, redis and postgres through the `.env` the README
shows (its image variables, given with --env-file). The file itself is used as written, with one
transformation for this machine: every service on the host's network, bound to 127.0.0.1 on free
ports (bridge networks get private addresses; nothing may go anywhere but loopback). It is the
README's trial (issue 48): no docker-compose.gpu.yml, so no NVIDIA reservation, and `up` works on
an engine without the NVIDIA runtime; its builds use the host's network as the file says (the
engine here, as scripts/setup.sh starts it, has no default bridge).
Then what an operator and a student do: create users as the README says, submit from the host
and watch the lines come, restart every service, `down` and `up` again, and a second worker host
(a compose project of its own, docker-compose.worker.yml) joining over Redis's TLS port with only
the documented files: the server's URL, the first host's address, secrets.env and redis-ca.pem."""

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
    s["secrets"]["command"] = [a.replace("redis:6379", f"127.0.0.1:{ports['redis']}") for a in s["secrets"]["command"]]
    redis_cmd = s["redis"]["command"][-1]
    assert "--tls-port 6380" in redis_cmd, redis_cmd
    s["redis"]["command"][-1] = redis_cmd.replace("--tls-port 6380", f"--tls-port {ports['redis_tls']}")
    s["redis"]["command"][-1] += f" --port {ports['redis']} --bind 127.0.0.1"
    s["postgres"]["environment"].update(PGPORT=str(ports["postgres"]), POSTGRES_LISTEN="127.0.0.1")
    s["server"]["command"] = [{"0.0.0.0": "127.0.0.1", "8000": str(ports["server"])}.get(a, a) for a in s["server"]["command"]]
    env = s["server"]["environment"]
    env["DATABASE_URL"] = env["DATABASE_URL"].replace("@postgres:5432", f"@127.0.0.1:{ports['postgres']}")
    env.update(RAI_PUBLIC_URL=f"http://127.0.0.1:{ports['server']}", RAI_HEARTBEAT_SECONDS="1", RAI_WORKER_DEAD_AFTER="6")
    a_worker_on_loopback(s["worker"], work)
    s["worker"]["environment"]["RAI_SERVER_URL"] = f"http://127.0.0.1:{ports['server']}"
    return spec


def a_worker_on_loopback(w: dict, work: Path) -> None:
    """A worker service of the README's files on this machine: its own work folder, beats every second."""
    assert "deploy" not in w, "the trial has no NVIDIA reservation: it lives in docker-compose.gpu.yml"
    w["network_mode"] = "host"
    w["environment"].update(RAI_METRICS_PORT="0", RAI_WORK_DIR=str(work), RAI_HEARTBEAT_SECONDS="1", RAI_WORKER_DEAD_AFTER="6")
    w["volumes"] = [v.replace("/var/lib/rai-worker:/var/lib/rai-worker", f"{work}:{work}") for v in w["volumes"]]


def env_file(path: Path, values: dict[str, str | int]) -> Path:
    """A `.env` as the README shows it (KEY=VALUE lines), for --env-file."""
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    return path


class Stack:
    def __init__(self, root: Path):
        self.root = root
        self.project = f"raici{uuid.uuid4().hex[:6]}"
        self.ports = {name: free_port() for name in ("redis", "redis_tls", "postgres", "server")}
        self.url = f"http://127.0.0.1:{self.ports['server']}"
        work = root / "worker"
        work.mkdir(parents=True)
        spec = on_loopback(yaml.safe_load((ROOT / "docker-compose.yml").read_text()), self.ports, work)
        self.file = root / "docker-compose.ci.yml"
        self.file.write_text(yaml.safe_dump(spec, sort_keys=False))
        # the README's .env: images and ports (published ports are the host network's here)
        self.env_file = env_file(root / "rai.env", {"RAI_PORT": self.ports["server"], **STANDINS})
        self.env = {k: v for k, v in os.environ.items() if k not in STANDINS and not k.startswith("COMPOSE_")}

    def words(self, project: str | None = None, file: Path | None = None, env: Path | None = None) -> list[str]:
        """`docker compose` as the README writes it, for this stack (or another project, file, .env)."""
        return [
            "docker-compose",
            "--env-file",
            str(env or self.env_file),
            "-p",
            project or self.project,
            "-f",
            str(file or self.file),
            "--project-directory",
            str(ROOT),
        ]

    def compose(
        self,
        *args: str,
        timeout: float = 600,
        check: bool = True,
        project: str | None = None,
        file: Path | None = None,
        env: Path | None = None,
    ) -> subprocess.CompletedProcess:
        res = subprocess.run(
            [*self.words(project, file, env), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and res.returncode != 0:
            raise AssertionError(f"docker-compose {' '.join(args)} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
        return res

    def sh(self, command: str, cwd: Path, **where: Path | str) -> subprocess.CompletedProcess:
        """A README line, run by bash in `cwd`, with `docker compose ` meaning this stack's docker-compose."""
        compose = " ".join(self.words(**where))  # type: ignore[arg-type]
        res = subprocess.run(
            ["bash", "-c", f"set -e -o pipefail; umask 077; cd {cwd}; " + command.replace("docker compose ", compose + " ")],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert res.returncode == 0, f"{command}\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
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


def readme_env(kind: str) -> str:
    """The README's `.env` for `kind` ("first host", "another host"): its fenced block whose first line is `# .env, kind`."""
    text = (ROOT / "docs" / "operating.md").read_text()
    m = re.search(rf"```\n *(# \.env, {kind}\n.*?)\n *```", text, re.S)
    assert m, f"the README shows no .env for {kind}"
    return "".join(line.strip() + "\n" for line in m.group(1).splitlines())


def test_the_readmes_env_sets_ports_images_and_the_gpu_and_the_files_build_on_the_host_network(tmp_path):
    """Issue 48, without starting anything (`docker-compose config`, a second): the README's .env
    as shown is what compose reads (the port, the three images, COMPOSE_FILE adding the GPU
    reservation; without it, the trial, no reservation), every build uses the host's network, and
    the worker-only file wants the first host's address and puts it, with Redis's TLS port, in a
    rediss:// URL that checks the CA."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAI_", "COMPOSE_", "POSTGRES_"))}

    def config(dotenv: str, *files: str) -> tuple[int, dict | str]:
        d = tmp_path / uuid.uuid4().hex[:6]
        d.mkdir()
        for f in ("docker-compose.yml", "docker-compose.gpu.yml", "docker-compose.worker.yml"):
            shutil.copy(ROOT / f, d / f)
        (d / ".env").write_text(dotenv)
        args = [a for f in files for a in ("-f", f)]
        res = subprocess.run(["docker-compose", *args, "config"], cwd=d, env=env, capture_output=True, text=True, timeout=60)
        return res.returncode, (yaml.safe_load(res.stdout) if res.returncode == 0 else res.stderr)

    first = readme_env("first host")
    for dotenv, gpu in ((first, True), (re.sub(r"^COMPOSE_FILE=.*\n", "", first, flags=re.M), False)):
        rc, spec = config(dotenv.replace("RAI_PORT=8000", "RAI_PORT=8123").replace("redis:7", "example/redis:7"))
        assert rc == 0 and isinstance(spec, dict), spec
        s = spec["services"]
        assert all(svc["build"]["network"] == "host" for svc in s.values() if "build" in svc)
        published = [str(p["published"]) if isinstance(p, dict) else p.rsplit(":", 2)[-2] for p in s["server"]["ports"]]
        assert published == ["8123"] and s["redis"]["image"] == "example/redis:7", s["server"]["ports"]
        assert s["secrets"]["build"]["args"]["PYTHON_IMAGE"] == "python:3.12-slim" and s["postgres"]["image"] == "postgres:16"
        assert ("deploy" in s["worker"]) == gpu, s["worker"]
    rc, spec = config("RAI_SERVER_URL=https://rai.example.edu\n", "docker-compose.worker.yml")
    assert rc != 0 and "RAI_MAIN_HOST" in str(spec)
    another = readme_env("another host")
    rc, spec = config(another)
    assert rc == 0 and isinstance(spec, dict), spec
    w = spec["services"]["worker"]
    assert list(spec["services"]) == ["worker"] and "deploy" in w and w["build"]["network"] == "host"
    assert "rediss://:$$(sed" in w["command"][-1] and "@gpu1.example.edu:6380/0?ssl_cert_reqs=required&ssl_ca_certs=" in w["command"][-1]


@pytest.fixture(scope="module")
def stack(tmp_path_factory, docker_engine):
    subprocess.run(["bash", str(ROOT / "images/standins/build.sh")], check=True, capture_output=True, timeout=900)
    st = Stack(tmp_path_factory.mktemp("compose"))
    for f in (ROOT / "docker-compose.yml", st.file):  # both files parse
        st.compose("config", "-q", file=f)
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

    def sh(st: Stack, command: str) -> subprocess.CompletedProcess:
        """A README line, with `compose` meaning this stack's docker-compose."""
        return st.sh(command.replace("compose ", "docker compose "), tmp_path)

    # back up (README "Back up", compose)
    sh(stack, "compose exec -T postgres pg_dump -U rai --format=custom --no-owner rai > rai.dump")
    sh(stack, "compose exec -T server tar -C /var/lib/rai -czf - . > rai-data.tar.gz")
    sh(stack, "compose exec -T server cat /run/rai/secrets.env > secrets.env")
    sh(stack, "compose exec -T server tar -C /run/rai -cf - redis-ca.pem redis-tls.crt redis-tls.key > redis-tls.tar")
    for name in ("rai.dump", "rai-data.tar.gz", "secrets.env", "redis-tls.tar"):
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
        sh(fresh, "compose run --rm -T --no-deps --entrypoint sh secrets -c 'umask 077; tar -C /run/rai -xf -' < redis-tls.tar")
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
        # and Redis's certificate: the other hosts' redis-ca.pem still fits
        ca = "cat /run/rai/redis-ca.pem"
        assert fresh.compose("exec", "-T", "server", "sh", "-c", ca).stdout == stack.compose("exec", "-T", "server", "sh", "-c", ca).stdout
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


def test_a_second_worker_host_joins_over_redis_tls_with_the_documented_steps(stack, tmp_path):
    """Issue 48: another machine, as the README's "Add a GPU host" says: a compose project of its
    own (docker-compose.worker.yml, sharing no network with the first: both on the host's network
    here, the first host's address 127.0.0.1), the two files copied from the first host with the
    README's lines, and a .env naming the server's URL and the first host's address and Redis TLS
    port. Its worker reaches Redis only there (password and TLS, the certificate checked against
    the copied CA). Its name is its container's host name (no setting); jobs spread over both, and
    a job whose worker is killed runs again on the other."""
    import redis

    admin = stack.root / "admin.profile"
    host2 = tmp_path / "host2"
    host2.mkdir()
    # the README's lines on the first host, then carried over (here: the same disk)
    stack.sh("mkdir -p rai-secrets", host2)
    stack.sh("docker compose exec -T server cat /run/rai/secrets.env > rai-secrets/secrets.env", host2)
    stack.sh("docker compose exec -T server cat /run/rai/redis-ca.pem > rai-secrets/redis-ca.pem", host2)
    secrets = host2 / "rai-secrets"
    assert all(f.stat().st_mode & 0o077 == 0 for f in secrets.iterdir())
    password = re.search(r"^RAI_REDIS_PASSWORD=(\S+)$", (secrets / "secrets.env").read_text(), re.M).group(1)
    tls = stack.ports["redis_tls"]
    ca = f"ssl_cert_reqs=required&ssl_ca_certs={secrets / 'redis-ca.pem'}&ssl_check_hostname=false"
    # the TLS port: the copied CA and the password get in; plain text, no password or another CA do not
    assert redis.Redis.from_url(f"rediss://:{password}@127.0.0.1:{tls}/0?{ca}", socket_timeout=5).ping()
    for url, refused in (
        (f"redis://:{password}@127.0.0.1:{tls}/0", redis.ConnectionError),
        (f"rediss://127.0.0.1:{tls}/0?{ca}", redis.AuthenticationError),
        (f"rediss://:{password}@127.0.0.1:{tls}/0?ssl_cert_reqs=required&ssl_check_hostname=false", redis.ConnectionError),
    ):
        with pytest.raises(refused):
            redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5).ping()
    # the second host's .env and compose file as written (on the host's network, its own work folder)
    env2 = env_file(
        host2 / ".env",
        {"RAI_SERVER_URL": stack.url, "RAI_MAIN_HOST": "127.0.0.1", "RAI_REDIS_TLS_PORT": tls, "RAI_SECRETS_DIR": secrets, **STANDINS},
    )
    spec = yaml.safe_load((ROOT / "docker-compose.worker.yml").read_text())
    assert list(spec["services"]) == ["worker"]
    work2 = host2 / "worker"
    work2.mkdir()
    a_worker_on_loopback(spec["services"]["worker"], work2)
    second = host2 / "docker-compose.worker.ci.yml"
    second.write_text(yaml.safe_dump(spec, sort_keys=False))
    project2 = stack.project + "w2"
    stack.compose("up", "-d", project=project2, file=second, env=env2, timeout=300)
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
        # the second worker's Redis connections: the TLS port, the only one it was told of
        env = subprocess.run(
            ["docker", "exec", f"{project2}_worker_1", "sh", "-c", "tr '\\0' '\\n' < /proc/1/environ"], capture_output=True, text=True
        ).stdout
        assert f"RAI_REDIS_URL=rediss://:{password}@127.0.0.1:{tls}/0?" in env, env
        clients = redis.Redis(port=stack.ports["redis"], password=password).client_list()
        assert any(c["laddr"].endswith(f":{tls}") for c in clients), clients
        victim = names_at[holder]
        subprocess.run(["docker", "kill", victim], check=True, capture_output=True)
        out = client(stack, admin, "logs", long_job, "--follow", timeout=240)
        assert "survived" in out.stdout, out.stdout + out.stderr
        final = job(long_job)
        assert final["state"] == "succeeded" and final["worker"] != holder, final
    finally:
        stack.compose("down", "-v", project=project2, file=second, env=env2, check=False, timeout=300)


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
    # the worker's own report at its restart, or, if the server was still away then (runner.recover),
    # its first heartbeat's, or the reaper's
    named = ("the run it held was lost; the job goes back in the queue", "is no longer running the job", "stopped answering")
    assert any(m in out for m in named), out
    final = httpx.get(f"{stack.url}/api/v1/jobs/{job_id}", auth=(p.access_key, p.secret_key), timeout=10).json()
    assert final["state"] == "succeeded", final
    after = restarts()
    assert after == {s: before[s] + 1 for s in before}, (before, after)  # the restart policy brought each back


def test_an_upgrade_with_a_job_running_lets_it_finish_once(stack, tmp_path):
    """Issue 48: `docker compose up -d` recreating the worker (an upgrade) killed a 40 s job after
    compose's 10 s stop grace and ran it again. The worker drains now (RAI_DRAIN_SECONDS) within a
    longer stop_grace_period: the job ends once, on its first attempt, and the new worker serves."""
    import sys

    admin = stack.root / "admin.profile"
    stack.compose("up", "-d", "worker")
    stack.workers_alive(admin, 1)
    proj = make_project(tmp_path / "upgrade", ["echo started; sleep 15; echo done-$((1 + 1))"], image="rai/busybox:latest")
    env = {**os.environ, "RAI_PROFILE": str(admin), "PYTHONUNBUFFERED": "1"}
    env.pop("RAI_SERVER", None)
    follow = subprocess.Popen(
        [sys.executable, "-m", "raiclient", "submit", "-p", str(proj)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    seen = ""
    while "started" not in seen.splitlines()[-1:] and follow.poll() is None:
        seen += follow.stdout.readline()
    stack.compose("up", "-d", "--force-recreate", "--no-deps", "worker", timeout=300)  # the new release's worker
    out = seen + follow.communicate(timeout=180)[0]
    assert follow.returncode == 0, out
    # one attempt: a rerun is said ("… goes back in the queue (attempt 2 of 3)") and prints the lines again
    assert "goes back in the queue" not in out and out.count("\nstarted\n") == 1, out
    assert out.count("\ndone-2\n") == 1 and "Job succeeded" in out, out
    res = client(stack, admin, "submit", "-p", str(make_project(tmp_path / "after", ["echo the new worker"], image="rai/busybox:latest")))
    assert res.returncode == 0 and "the new worker" in res.stdout, res.stdout + res.stderr
