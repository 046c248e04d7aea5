"""Runs a job as plain processes, for a GPU host with no Docker engine (chosen by configuration).

There is no container: commands run with the worker's user, in a fresh temporary folder, each in
its own process group (killed whole on timeout, cancel, and at its end so no orphan survives),
with resource limits set before exec. Paths ``/src`` and ``/build`` in the build file's commands
point at the job's folders, so the same rai_build.yml runs here and in a container.

Beside each command runs its lease's watcher (``WATCH``), in a session of its own: a worker paused
whole (its process group stopped) does not stop it, and it kills the command's process group once
the lease's stamp runs out, before the server may run the job elsewhere (issue 51).
"""

from __future__ import annotations

import contextlib
import os
import resource
import selectors
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

from raiprotocol.models import LogStream

from ..lease import LEASE_EXIT, PAST_BOOT_SH
from ..logsink import LogSink
from ..terminal import Frames, no_terminal_note, pty_helper, terminal_env
from ..workdir import lease_stamp, rewrite_paths
from .base import Executor, JobContext

# sh -c WATCH sh STAMP PGID FIRED: while the group lives, each second; past the stamp, FIRED is
# made (before the kill: the run finds it once its command ended) and the group killed
WATCH = (
    'STAMP=$1; while kill -0 -"$2" 2>/dev/null; do if '
    + PAST_BOOT_SH
    + f'; then : > "$3"; kill -9 -"$2"; exit {LEASE_EXIT}; fi; sleep 1; done'
)


class ProcessExecutor(Executor):
    name = "process"

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.watcher: subprocess.Popen[bytes] | None = None  # the running command's lease watcher
        self.fired: Path | None = None  # made by a watcher that stopped the job
        self.killed = False
        self.helper: Path | None = None

    def start(self, ctx: JobContext, sink: LogSink) -> str:
        os.chmod(ctx.build_dir, 0o777)
        self.fired = ctx.build_dir.parent / "lease-stopped"
        self.helper = pty_helper(ctx.settings.work_dir, ctx.settings.pty_helper)
        if self.helper is None:
            sink.system(no_terminal_note())
        gpu = f", GPU {','.join(ctx.gpu_ids)}" if ctx.gpu_ids else ""
        return f"Worker {ctx.settings.worker_name} started the job as processes (no container; image {ctx.image} not used{gpu})"

    def _limits(self, ctx: JobContext) -> Callable[[], None]:
        s = ctx.settings
        memory = ctx.memory_mb * 1024**2
        use_as = not ctx.gpu_ids  # CUDA reserves huge address ranges: RLIMIT_AS would break it

        def apply() -> None:
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            resource.setrlimit(resource.RLIMIT_NOFILE, (s.nofile, s.nofile))
            if use_as:
                resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

        return apply

    def run_command(self, ctx: JobContext, command: str, sink: LogSink) -> int:
        env = {
            **ctx.settings.job_env,
            **terminal_env(ctx.settings.columns),
            "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
            "HOME": str(ctx.build_dir),
            "LANG": "C.UTF-8",
            "RAI_JOB_ID": ctx.job_id,
            "RAI_SRC": str(ctx.src_dir),
            "RAI_BUILD": str(ctx.build_dir),
            "TMPDIR": str(ctx.build_dir.parent / "tmp"),
        }
        for key in ("LD_LIBRARY_PATH", "CUDA_HOME", "PYTHONPATH"):
            if key in os.environ:
                env[key] = os.environ[key]
        if ctx.gpu_ids:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(ctx.gpu_ids)
        os.makedirs(env["TMPDIR"], exist_ok=True)
        real = rewrite_paths(command, str(ctx.src_dir), str(ctx.build_dir))
        argv = ["/bin/sh", "-c", real]
        if self.helper:  # both streams on stdout as frames, in the order printed (two pipes lose it when the worker stalls)
            env["RAI_PTY_FRAMES"] = "1"
        self.proc = subprocess.Popen(
            [str(self.helper), *argv] if self.helper else argv,
            cwd=ctx.build_dir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=self._limits(ctx),
        )
        assert self.proc.stdout is not None and self.proc.stderr is not None  # both are pipes
        self.watcher = subprocess.Popen(
            ["/bin/sh", "-c", WATCH, "sh", str(lease_stamp(ctx.settings.work_dir)), str(self.proc.pid), str(self.fired)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        frames = Frames(sink) if self.helper else None  # else the command's own two pipes
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ, LogStream.out)
        sel.register(self.proc.stderr, selectors.EVENT_READ, LogStream.err)  # framed: only the helper's complaints
        open_streams = 2
        while open_streams:
            ready = sel.select(timeout=0.5)
            if not ready and self.proc.poll() is not None:
                break  # the command ended; a background child still holds its output open
            for selected, _ in ready:
                data = os.read(selected.fd, 65536)
                if not data:
                    sel.unregister(selected.fileobj)
                    open_streams -= 1
                elif frames is not None and selected.data is LogStream.out:
                    frames.feed(data)
                else:
                    sink.feed(selected.data, data)
        sel.close()
        if frames is not None:
            frames.cut_short()  # the helper killed mid-frame (timeout, cancel, the lease): the tail all the same
        code = self.proc.wait()  # the helper reports a command killed by signal N as 128+N
        self._kill_group()  # orphans and background children die with the command
        self._stop_watcher()
        return 128 - code if code < 0 else code  # -9 → 137, as a shell reports it

    def _stop_watcher(self) -> None:
        if self.watcher is not None:
            self.watcher.kill()
            self.watcher.wait()
            self.watcher = None

    def lease_stopped(self, wait: float = 0.0) -> bool:
        return self.fired is not None and self.fired.exists()

    def _kill_group(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)

    def explain_kill(self, code: int, ctx: JobContext) -> str | None:
        if code == 137 and not self.killed:
            return f"killed by signal 9 (out of memory? the limit is {ctx.memory_mb / 1024:g} GiB)"
        return None

    def kill(self) -> None:
        self.killed = True
        self._kill_group()

    def cleanup(self) -> None:
        self._kill_group()
        self._stop_watcher()
        self.proc = None
