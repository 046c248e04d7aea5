"""Runs a job as one Slurm batch job, for courses whose GPUs sit in a university cluster.

The worker runs wherever ``sbatch`` works (a login node) and its work folder must be on a file
system the compute nodes share. ``start`` submits a small agent script (``--gres=gpu:N``,
``--time``, ``--mem``, ``--cpus-per-task``, ``--partition``/``--account``) and waits while the job
is PENDING, telling the student Slurm's reason, position and estimated start. Inside the allocation
the agent runs the commands the worker hands it one at a time (``ctl/N.cmd``), each under the pty
helper in framed mode, so stdout and stderr reach one file in order (``ctl/N.out``), which the
worker reads as it grows: lines reach the student while the command runs. ``ctl/N.status`` holds
the exit status. Kill and cancel are ``scancel``; the final Slurm state explains a death
(TIMEOUT, OUT_OF_MEMORY, NODE_FAIL → the job is queued again).

Containers: with ``RAI_SLURM_CONTAINER=apptainer`` each command runs in the job's image
(``apptainer exec --containall --no-home --cleanenv`` with /src read-only and /build bound; the
pty helper stays outside, so programs inside still see terminals). With ``none`` (the default)
commands run directly on the compute node as the worker's user, with /src and /build rewritten to
the job's folders, as the process executor does: trust model of the cluster's own accounts (see
docs/operating.md, "Running on a Slurm cluster").
"""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
import time
from pathlib import Path

from raiprotocol.models import JobState

from ..config import WorkerSettings
from ..errors import SlurmError
from ..lease import LEASE_EXIT, PAST_EPOCH_SH
from ..logsink import LogSink
from ..terminal import Frames, pty_helper, terminal_env
from ..workdir import lease_stamp, rewrite_paths
from .base import Executor, JobContext, Outcome

POLL = 0.02  # how often the growing output file is read: well under the ~1 s promise
# reasons a pending job never leaves: the request does not fit the partition or the account
NEVER = {
    "BadConstraints",
    "PartitionConfig",
    "PartitionNodeLimit",
    "PartitionTimeLimit",
    "InvalidAccount",
    "InvalidQOS",
    "QOSMaxCpuPerJobLimit",
    "QOSMaxMemoryPerJob",
    "QOSMaxGRESPerJob",
    "AssocMaxCpuPerJobLimit",
}
GONE = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE"}

# The agent's lease watcher (issue 51), in the allocation: a worker paused, frozen or cut off does
# not stop it. Once the lease's stamp (on the shared file system; the wall clock is what the node
# and the worker's host have in common) is past, it says so in ctl/lease-stopped and ends the job.
AGENT_WATCH = (
    "while :; do if "
    + PAST_EPOCH_SH
    + f'; then : > "$ctl/lease-stopped"; scancel "$SLURM_JOB_ID" 2>/dev/null; kill -9 0; exit {LEASE_EXIT}; fi; sleep 1; done'
)

AGENT = """#!/bin/sh
# rai agent for job {job_id}: runs ctl/N.cmd in order as the worker writes them; stops at ctl/end.
ctl={ctl}
STAMP={stamp}
cd {build} || exit 120
( {watch} ) &
watch=$!
n=1
while :; do
  while [ ! -e "$ctl/$n.cmd" ] && [ ! -e "$ctl/end" ]; do sleep 0.02; done
  [ -e "$ctl/$n.cmd" ] || {{ kill "$watch"; exit 0; }}
  RAI_PTY_FRAMES=1 {pty} {runner} /bin/sh "{inner_ctl}/$n.cmd" > "$ctl/$n.out" 2>&1 < /dev/null
  echo $? > "$ctl/$n.tmp" && mv "$ctl/$n.tmp" "$ctl/$n.status"
  n=$((n + 1))
done
"""


def _run(args: list[str], timeout: float = 60) -> str:
    try:
        res = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SlurmError(f"{args[0]} failed: {exc}") from None
    if res.returncode != 0:
        raise SlurmError(f"{' '.join(args[:2])} failed ({res.returncode}): {res.stderr.strip()[-500:]}")
    return res.stdout


def job_fields(slurm_id: str) -> dict[str, str]:
    """``scontrol show job`` as a dict (JobState, Reason, ExitCode, StartTime…); {} once forgotten."""
    try:
        text = _run(["scontrol", "show", "job", "-o", slurm_id], timeout=30)
    except SlurmError:
        return {}
    out: dict[str, str] = {}
    for token in text.split():
        key, sep, value = token.partition("=")
        if sep and key not in out:
            out[key] = value
    return out


def pending_position(slurm_id: str, partition: str | None) -> tuple[int, int] | None:
    """(position, pending jobs) among the partition's pending jobs in Slurm's priority order."""
    args = ["squeue", "-h", "-t", "PD", "-o", "%i", "--sort=-p,i"]
    if partition:
        args += ["-p", partition]
    try:
        ids = _run(args, timeout=30).split()
    except SlurmError:
        return None
    return (ids.index(slurm_id) + 1, len(ids)) if slurm_id in ids else None


class SlurmExecutor(Executor):
    name = "slurm"
    started_phase = "slurm started"

    @classmethod
    def prepare_host(cls, settings: WorkerSettings, gpu_indexes: list[int]) -> list[str]:
        """Nothing to say of this host: the jobs run on the cluster's nodes, whose GPUs are theirs."""
        return []

    def __init__(self) -> None:
        self.slurm_id: str | None = None
        self.ctl: Path | None = None
        self.n = 0
        self.final: dict[str, str] = {}
        self.killed = False
        self.container = "none"

    # -- submission ------------------------------------------------------------------------------
    def _script(self, ctx: JobContext, helper: Path) -> str:
        s = ctx.settings
        self.container = s.slurm_container
        runner, inner_ctl = "", str(self.ctl)
        if self.container == "apptainer":
            inner_ctl = "/opt/rai/ctl"
            binds = f"{ctx.src_dir}:/src:ro,{ctx.build_dir}:/build,{self.ctl}:{inner_ctl}:ro"
            env = ",".join(f"{k}={v}" for k, v in self._env(ctx).items() if k not in ("PATH", "HOME"))
            runner = (
                f"{shlex.quote(s.slurm_apptainer)} exec --containall --no-home --cleanenv --pwd /build "
                f"{'--nv ' if ctx.gpu_count else ''}--env {shlex.quote(env + ',HOME=/build')} "
                f"--bind {shlex.quote(binds)} {shlex.quote(self._image_ref(ctx))}"
            )
        return AGENT.format(
            job_id=ctx.job_id,
            ctl=shlex.quote(str(self.ctl)),
            stamp=shlex.quote(str(lease_stamp(s.work_dir))),
            watch=AGENT_WATCH,
            build=shlex.quote(str(ctx.build_dir)),
            pty=shlex.quote(str(helper)),
            runner=runner,
            inner_ctl=shlex.quote(inner_ctl),
        )

    @staticmethod
    def _image_ref(ctx: JobContext) -> str:
        image = ctx.image
        if image.endswith(".sif") or image.startswith(("docker://", "oras://", "library://", "/")):
            return image
        return f"docker://{image}"

    def _sbatch_args(self, ctx: JobContext, script: Path) -> list[str]:
        s = ctx.settings
        assert self.ctl is not None, "start() makes the control folder first"
        minutes = max(1, -(-(ctx.wall_seconds + s.slurm_grace_seconds) // 60))
        args = [
            "sbatch",
            "--parsable",
            f"--job-name=rai-{ctx.job_id}",
            f"--time={minutes}",
            f"--mem={ctx.memory_mb}M",
            f"--cpus-per-task={max(1, int(s.cpus))}",
            f"--output={self.ctl / 'agent.log'}",
            f"--chdir={ctx.build_dir}",
            "--no-requeue",
            "--export=NONE," + ",".join(f"{k}={v}" for k, v in self._env(ctx).items()),
        ]
        if ctx.gpu_count:
            args.append(f"--gres=gpu:{ctx.gpu_count}")
        if s.slurm_partition:
            args.append(f"--partition={s.slurm_partition}")
        if s.slurm_account:
            args.append(f"--account={s.slurm_account}")
        return [*args, *shlex.split(s.slurm_extra), str(script)]

    def _env(self, ctx: JobContext) -> dict[str, str]:
        env = {
            **ctx.settings.job_env,
            **terminal_env(ctx.settings.columns),
            "RAI_JOB_ID": ctx.job_id,
            "HOME": "/build" if self.container == "apptainer" else str(ctx.build_dir),
            "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
            "LANG": "C.UTF-8",
        }
        return {k: v for k, v in env.items() if "," not in v and "=" not in k}  # --export's own syntax

    def start(self, ctx: JobContext, sink: LogSink) -> str:
        helper = pty_helper(ctx.settings.work_dir, ctx.settings.pty_helper)
        if helper is None:
            raise SlurmError("the Slurm executor needs the pty helper (a C compiler on the worker, or RAI_PTY_HELPER)")
        os.chmod(ctx.build_dir, 0o777)
        self.ctl = ctx.build_dir.parent / "ctl"
        self.ctl.mkdir(parents=True, exist_ok=True)
        script = self.ctl / "agent.sh"
        script.write_text(self._script(ctx, helper))
        script.chmod(0o755)
        self.slurm_id = _run(self._sbatch_args(ctx, script)).strip().split(";")[0]
        ctx.phase("slurm submitted", f"Slurm job {self.slurm_id}")
        sink.system(
            f"Submitted to Slurm as job {self.slurm_id}"
            + (f" (partition {ctx.settings.slurm_partition})" if ctx.settings.slurm_partition else "")
        )
        self._wait_running(ctx, sink)
        gpu = f", {ctx.gpu_count} GPU(s)" if ctx.gpu_count else ""
        where = self.final.get("NodeList") or "?"
        how = f"in image {ctx.image} (apptainer)" if self.container == "apptainer" else f"without a container (image {ctx.image} not used)"
        return f"Slurm job {self.slurm_id} started on {where}{gpu}, {how}"

    def _wait_running(self, ctx: JobContext, sink: LogSink) -> None:
        """While PENDING: the reason, position and estimated start, each time they change."""
        said = ""
        while not self.killed:
            fields = job_fields(self.slurm_id or "")
            state = fields.get("JobState", "")
            if state in ("RUNNING", "COMPLETING") or state in GONE:
                self.final = fields
                if said:
                    ctx.report_waiting(None)
                return
            if state == "PENDING" and fields.get("Reason") in NEVER:
                self.kill()
                self.killed = False
                raise SlurmError(
                    f"Slurm cannot run this request ({fields.get('Reason')}: CPUs {fields.get('NumCPUs', '?')}, "
                    f"memory {ctx.memory_mb} MB, {ctx.gpu_count} GPU(s)); the operator must fit RAI_CPUS, "
                    "RAI_MEMORY_MB or RAI_SLURM_PARTITION to the cluster"
                )
            if state == "PENDING":
                pos = pending_position(self.slurm_id or "", ctx.settings.slurm_partition or None)
                start = fields.get("StartTime", "Unknown")
                words = (
                    f"Queued in Slurm: {fields.get('Reason', '?')}"
                    + (f", position {pos[0]} of {pos[1]} pending" if pos else "")
                    + (f", estimated start {start.replace('T', ' ')}" if start not in ("Unknown", "N/A", "") else "")
                )
                if words != said:
                    sink.system(words)
                    ctx.phase("slurm pending", words)
                    ctx.report_waiting(words)
                    said = words
            time.sleep(ctx.settings.slurm_poll_seconds)

    # -- commands --------------------------------------------------------------------------------
    def run_command(self, ctx: JobContext, command: str, sink: LogSink) -> int:
        assert self.ctl is not None
        if self.final.get("JobState") in GONE:
            return 137
        self.n += 1
        n = self.n
        real = command if self.container == "apptainer" else rewrite_paths(command, str(ctx.src_dir), str(ctx.build_dir))
        tmp = self.ctl / f"{n}.cmd.tmp"
        tmp.write_text(real + "\n")
        os.replace(tmp, self.ctl / f"{n}.cmd")
        out, status = self.ctl / f"{n}.out", self.ctl / f"{n}.status"
        frames = Frames(sink)
        pos = 0
        checked = time.monotonic()
        while True:
            done = status.exists()  # before reading: what is written before the status is read below
            if out.exists():
                with out.open("rb") as fh:
                    fh.seek(pos)
                    data = fh.read()
                if data:
                    pos += len(data)
                    frames.feed(data)
            if done:
                return int(status.read_text().strip() or 1)
            if time.monotonic() - checked > ctx.settings.slurm_poll_seconds:
                checked = time.monotonic()
                fields = job_fields(self.slurm_id or "")
                if fields.get("JobState") in GONE or (self.killed and not fields):
                    self.final = fields
                    time.sleep(0.2)  # the file system may show the last bytes a moment later
                    if status.exists():
                        continue
                    return 137  # as a shell reports a killed command
            time.sleep(POLL)

    def ended_as(self) -> tuple[str, str] | None:
        """Slurm's verdict on a job that died under a command: (state, sentence)."""
        state = self.final.get("JobState", "")
        reason = self.final.get("Reason", "")
        log = ""
        if self.ctl is not None and (self.ctl / "agent.log").exists():
            log = (self.ctl / "agent.log").read_text(errors="replace")[-4000:]
        if state == "OUT_OF_MEMORY" or "memory limit" in log.lower():
            return "OUT_OF_MEMORY", "killed: out of memory (Slurm's --mem limit)"
        if state == "TIMEOUT":
            return "TIMEOUT", "Slurm ended the job at its time limit"
        if state in ("NODE_FAIL", "BOOT_FAIL", "PREEMPTED"):
            return state, f"Slurm lost the job's node ({state}{', ' + reason if reason and reason != 'None' else ''})"
        if state:
            return state, f"the Slurm job ended ({state}{', ' + reason if reason and reason != 'None' else ''})"
        return None

    def lease_stopped(self, wait: float = 0.0) -> bool:
        return self.ctl is not None and (self.ctl / "lease-stopped").exists()

    def explain_kill(self, code: int, ctx: JobContext) -> str | None:
        verdict = None if self.killed else self.ended_as()
        return verdict[1] if verdict else None

    def ended(self, code: int, ctx: JobContext) -> Outcome | None:
        """TIMEOUT: timed out; a lost node: back in the queue (the server runs it again)."""
        verdict = None if self.killed else self.ended_as()
        if verdict is None:
            return None
        if verdict[0] == "TIMEOUT":
            return Outcome(JobState.timed_out, message=f"timed out: {verdict[1]}")
        if verdict[0] in ("NODE_FAIL", "BOOT_FAIL", "PREEMPTED"):
            return Outcome(JobState.queued, message=verdict[1])
        return None

    # -- the end ---------------------------------------------------------------------------------
    def kill(self) -> None:
        self.killed = True
        if self.slurm_id:
            with contextlib.suppress(SlurmError):
                _run(["scancel", self.slurm_id], timeout=30)

    def cleanup(self) -> None:
        """Let the agent leave (ctl/end); cancel whatever still runs."""
        if self.ctl is not None:
            (self.ctl / "end").touch()
        if not self.slurm_id:
            return
        deadline = time.monotonic() + 5
        while job_fields(self.slurm_id).get("JobState", "") not in GONE | {""}:
            if time.monotonic() > deadline:
                self.kill()
                return
            time.sleep(0.2)
