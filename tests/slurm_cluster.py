"""A one-node Slurm cluster on this machine for the Slurm executor's tests (Debian's slurm-wlm:
slurmctld, slurmd, munge), CPU-only, configured in a temporary folder on free ports."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from helpers import free_port as _free_port


@dataclass
class Cluster:
    conf: Path
    procs: list[subprocess.Popen]

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def run(self, *args: str) -> str:
        return subprocess.run(list(args), env={**os.environ, **self.env}, capture_output=True, text=True, check=True, timeout=60).stdout

    def stop(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()


def missing() -> str | None:
    for tool in ("slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "munged", "munge"):
        if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists():
            return tool
    return None


def _munge_ok() -> bool:
    try:
        return subprocess.run("munge -n | unmunge", shell=True, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def start(tmp: Path) -> Cluster:
    if not _munge_ok():
        Path("/run/munge").mkdir(parents=True, exist_ok=True)
        shutil.chown("/run/munge", "munge", "munge")
        subprocess.run(["/usr/sbin/munged", "--force"], capture_output=True, timeout=30)  # as root on a test machine
        for _ in range(50):
            if _munge_ok():
                break
            time.sleep(0.1)
        else:
            raise RuntimeError("munged did not start")
    host = socket.gethostname().split(".")[0]
    cpus = os.cpu_count() or 1
    mem_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 1024**2 // 2
    for sub in ("state", "spool", "log"):
        (tmp / sub).mkdir(parents=True, exist_ok=True)
    conf = tmp / "slurm.conf"
    conf.write_text(f"""ClusterName=raitest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation={tmp / "state"}
SlurmdSpoolDir={tmp / "spool"}
SlurmctldPidFile={tmp / "slurmctld.pid"}
SlurmdPidFile={tmp / "slurmd.pid"}
SlurmctldLogFile={tmp / "log" / "slurmctld.log"}
SlurmdLogFile={tmp / "log" / "slurmd.log"}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=1
JobAcctGatherParams=OverMemoryKill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
MinJobAge=600
KillWait=2
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={mem_mb} State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
""")
    env = {**os.environ, "SLURM_CONF": str(conf)}
    procs = [subprocess.Popen(["slurmctld", "-D", "-c", "-f", str(conf)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    time.sleep(0.5)
    procs.append(subprocess.Popen(["slurmd", "-D", "-c", "-f", str(conf)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    cluster = Cluster(conf, procs)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if "idle" in cluster.run("sinfo", "-h", "-o", "%T"):
                return cluster
        except subprocess.SubprocessError:
            pass
        time.sleep(0.5)
    cluster.stop()
    logs = "\n".join(p.read_text()[-1500:] for p in (tmp / "log").glob("*.log"))
    raise RuntimeError(f"the Slurm cluster did not come up:\n{logs}")
