"""GPUs of this host: discovery through nvidia-smi, and which jobs hold them.

Each Celery process takes a GPU by holding exclusive lock files for it, so a job's container is
given exactly the device it holds, whatever the number of processes. A GPU may be shared by up to
``RAI_JOBS_PER_GPU`` jobs (one lock per share); ranked runs hold every share and the host.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from raiprotocol.models import GpuInfo

from ..errors import NoGpu


class Stopped(Exception):
    """The job was stopped (cancelled, its lease gone) while it waited for its host or its GPUs."""


def _never() -> bool:
    return False


def discover(spec: str) -> list[GpuInfo]:
    """``auto``: ask nvidia-smi; ``none``: no GPUs; ``0,1``: these ids (details from nvidia-smi if any)."""
    if spec.strip().lower() == "none":
        return []
    found: list[GpuInfo] = []
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=index,name,memory.total", "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
                timeout=20,
                check=True,
            ).stdout
            for row in out.strip().splitlines():
                idx, name, mem = (p.strip() for p in row.split(","))
                found.append(GpuInfo(index=int(idx), name=name, memory_mb=int(float(mem))))
        except (subprocess.SubprocessError, ValueError, OSError):
            found = []
    if spec.strip().lower() == "auto":
        return found
    wanted = [int(x) for x in spec.split(",") if x.strip()]
    by_index = {g.index: g for g in found}
    return [by_index.get(i, GpuInfo(index=i)) for i in wanted]


def _slot_file(lock_dir: Path, gpu: int, k: int) -> Path:
    # one lock per share of a GPU; share 0 keeps the name a GPU's one lock always had
    return lock_dir / (f"gpu{gpu}.lock" if k == 0 else f"gpu{gpu}.{k}.lock")


def _take(lock_dir: Path, gpu: int, per_gpu: int, need: int) -> list[int] | None:
    """``need`` of the GPU's ``per_gpu`` shares, taken now, or None (nothing kept)."""
    fds: list[int] = []
    for k in range(per_gpu):
        fd = os.open(_slot_file(lock_dir, gpu, k), os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fds.append(fd)
            if len(fds) == need:
                return fds
        except BlockingIOError:
            os.close(fd)
    for fd in fds:
        os.close(fd)
    return None


def occupancy(lock_dir: Path, gpus: list[GpuInfo], per_gpu: int) -> dict[int, int]:
    """How many shares of each GPU jobs hold now (probed: a lock taken here is let go at once)."""
    used: dict[int, int] = {}
    for g in gpus:
        used[g.index] = 0
        for k in range(per_gpu):
            path = _slot_file(lock_dir, g.index, k)
            if not path.exists():
                continue
            fd = os.open(path, os.O_RDWR)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                used[g.index] += 1
            finally:
                os.close(fd)
    return used


class GpuHold(list[str]):
    """The GPU ids a job holds (a list, as it always was) and the locks behind them, which a ranked
    run lets go between its timed runs and takes back, the same GPUs (``HostHold.let_waiting_in``)."""

    def __init__(self, lock_dir: Path, per_gpu: int, need: int, held: list[tuple[int, list[int]]]):
        super().__init__(str(i) for i, _ in held)
        self.lock_dir, self.per_gpu, self.need = lock_dir, per_gpu, need
        self.fds = [fd for _, fds in held for fd in fds]

    def release(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []

    def retake(self) -> None:
        """The same GPUs again; called holding the host alone, so no other job holds them."""
        while not self.fds:
            got = [_take(self.lock_dir, int(i), self.per_gpu, self.need) for i in self]
            if all(fds is not None for fds in got):
                self.fds = [fd for fds in got if fds is not None for fd in fds]
                return
            for fds in got:
                for fd in fds or []:
                    os.close(fd)
            time.sleep(0.05)


@contextmanager
def hold_gpus(
    lock_dir: Path,
    gpus: list[GpuInfo],
    count: int,
    wait: float = 3600.0,
    per_gpu: int = 1,
    share: int = 1,
    stopped: Callable[[], bool] = _never,
) -> Iterator[GpuHold]:
    """Yield ``count`` GPU ids held by this process until the block ends.

    A GPU is cut in ``per_gpu`` shares (``RAI_JOBS_PER_GPU``'s largest value on this worker); a
    job of a queue that allows ``share`` jobs per GPU takes ``per_gpu // share`` of them, so
    ``share`` 1 (and every ranked run) has the GPU alone. The least used GPUs are taken first."""
    if count <= 0:
        yield GpuHold(lock_dir, 1, 1, [])
        return
    if count > len(gpus):
        raise NoGpu(f"the job asks for {count} GPU(s); this worker has {len(gpus)}")
    lock_dir.mkdir(parents=True, exist_ok=True)
    per_gpu = max(per_gpu, 1)
    need = max(per_gpu // max(min(share, per_gpu), 1), 1)
    deadline = time.monotonic() + wait
    while True:
        used = occupancy(lock_dir, gpus, per_gpu) if per_gpu > 1 else {}
        held: list[tuple[int, list[int]]] = []
        for g in sorted(gpus, key=lambda g: (used.get(g.index, 0), g.index)):
            fds = _take(lock_dir, g.index, per_gpu, need)
            if fds is not None:
                held.append((g.index, fds))
                if len(held) == count:
                    break
        if len(held) == count:
            break
        for _, fds in held:
            for fd in fds:
                os.close(fd)
        if time.monotonic() > deadline:
            raise NoGpu("timed out waiting for a free GPU")
        if stopped():
            raise Stopped()
        time.sleep(0.2)
    hold = GpuHold(lock_dir, per_gpu, need, held)
    try:
        yield hold
    finally:
        hold.release()


def _took(fd: int, mode: int) -> bool:
    """``flock`` if it can be had at once."""
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def _lock(fd: int, mode: int, blocked: Callable[[], None], stopped: Callable[[], bool] = _never) -> bool:
    """``flock`` at once if it can be had, else ``blocked()`` then wait for it, looking every 50 ms
    whether the job was stopped meanwhile (``Stopped``): a cancelled ranked run waiting for a long
    job to end once stayed "running" until it ended. Whether it waited."""
    if _took(fd, mode):
        return False
    blocked()
    while not _took(fd, mode):
        if stopped():
            raise Stopped()
        time.sleep(0.05)
    return True


def _no_ranked_run(first: int) -> bool:
    """No ranked run waits for the host or runs on it (it holds ``first`` throughout)."""
    if not _took(first, fcntl.LOCK_SH):
        return False
    fcntl.flock(first, fcntl.LOCK_UN)
    return True


def _host_unless_ranked(first: int, host: int, told: Callable[[str], None]) -> bool:
    """Holding the gate: the host alone once the jobs on it end; False once a ranked run waits."""
    while _no_ranked_run(first):
        if _took(host, fcntl.LOCK_EX):
            if _no_ranked_run(first):  # one that came meanwhile still goes first
                return True
            fcntl.flock(host, fcntl.LOCK_UN)
            return False
        told("jobs")
        time.sleep(0.05)
    return False


def _alone_after_ranked_runs(
    first: int, gate: int, host: int, tell: Callable[[str | None], None], stopped: Callable[[], bool] = _never
) -> bool:
    """A student's own exclusive run: the gate, then the host alone, as a ranked run takes them,
    but never ahead of one. While a ranked run waits, this one lets the gate go and starts over
    (flock wakes its waiters in no set order, so two exclusive runs waiting on the gate once kept a
    ranked run waiting for both: issue 32). Whether it waited."""
    waited = False

    def told(why: str) -> None:
        nonlocal waited
        if not waited:
            tell(why)
            waited = True

    while True:
        if _no_ranked_run(first) and _took(gate, fcntl.LOCK_EX):
            if _host_unless_ranked(first, host, told):
                return waited
            fcntl.flock(gate, fcntl.LOCK_UN)
        told("exclusive")
        if stopped():
            raise Stopped()
        time.sleep(0.05)


LET_IN_SECONDS = 2.0  # how long a ranked run, between its timed runs, leaves the gate to the jobs waiting at it


class HostHold:
    """The host locks a job holds (``host_share``). A ranked run holds the host alone from its start
    to its end, but between its timed runs it lets in the jobs waiting at the gate then (issue 46:
    another student's job waits for one timed run, each bounded, not for the whole ranked job): it
    lets the gate, the host and its GPUs go, gives the waiters ``LET_IN_SECONDS`` to pass the gate,
    shuts it again (no job that came later starts) and has the host alone once those ended (each
    within its wall limit), its GPUs the same ones as before."""

    def __init__(self, first: int, gate: int, host: int, waiting: int, tail: int, ranked: bool):
        self.first, self.gate, self.host, self.waiting, self.ranked = first, gate, host, waiting, ranked
        self.tail: int | None = tail

    def keep_tail(self) -> int | None:
        """The tail lock, for the job to hold until its build folder is sent and its container gone
        (a ranked run's next timed run waits for that too); the caller closes it."""
        tail, self.tail = self.tail, None
        return tail

    def others_waiting(self) -> bool:
        return _waited_on(self.waiting)

    def let_waiting_in(
        self, gpus: GpuHold | None = None, tell: Callable[[], None] | None = None, stopped: Callable[[], bool] = lambda: False
    ) -> bool:
        """Between timed runs: the jobs waiting now run first; whether there were any. ``stopped()``
        (the run cancelled meanwhile) ends the wait for the host without it."""
        if not self.ranked or not self.others_waiting():
            return False
        if tell is not None:
            tell()
        if gpus is not None:
            gpus.release()
        if self.tail is not None:
            fcntl.flock(self.tail, fcntl.LOCK_UN)
        fcntl.flock(self.host, fcntl.LOCK_UN)
        fcntl.flock(self.gate, fcntl.LOCK_UN)
        until = time.monotonic() + LET_IN_SECONDS
        time.sleep(0.05)
        while self.others_waiting() and time.monotonic() < until:  # each drops its mark once it has the host
            time.sleep(0.05)
        # ``first`` still held: no exclusive run nor ranked run goes first; then those that came in end,
        # their build folders sent and their containers gone (the tail)
        taken = _taken(self.gate, fcntl.LOCK_EX, stopped) and _taken(self.host, fcntl.LOCK_EX, stopped)
        if taken and (self.tail is None or _taken(self.tail, fcntl.LOCK_EX, stopped)) and gpus is not None:
            gpus.retake()
        return True


def _taken(fd: int, mode: int, stopped: Callable[[], bool]) -> bool:
    """``flock``, waiting for it while not ``stopped()``; whether it was had."""
    while not _took(fd, mode):
        if stopped():
            return False
        time.sleep(0.05)
    return True


@contextmanager
def host_share(
    lock_dir: Path,
    exclusive: bool,
    waiting: Callable[[str | None], None] | None = None,
    ranked: bool = False,
    stopped: Callable[[], bool] = _never,
) -> Iterator[HostHold]:
    """Every job holds the host lock shared; an exclusive job (timing runs) holds it alone, so it
    starts only when the host is idle and nothing starts beside it.

    A ranked run (``ranked``: the server's reserved lane) is not starved (issue 32): it first marks
    itself waiting (``host.ranked``), which makes a student's own exclusive runs stand aside, then
    takes the gate, which every job passes (shared, for a moment) on its way in, and holds it while
    it waits for the jobs already running to end: from then on no new job starts on the host, so it
    waits at most for the longest of those (each bounded by its wall clock), however many jobs,
    exclusive or not, come after it.

    ``waiting(why)`` hears it when the job has to wait (``why``: "jobs" for the host's other jobs,
    "exclusive" for an exclusive run), and ``waiting(None)`` once it has the host."""
    lock_dir.mkdir(parents=True, exist_ok=True)
    first = os.open(lock_dir / "host.ranked", os.O_CREAT | os.O_RDWR, 0o644)
    gate = os.open(lock_dir / "host.gate", os.O_CREAT | os.O_RDWR, 0o644)
    fd = os.open(lock_dir / "host.lock", os.O_CREAT | os.O_RDWR, 0o644)
    marks = os.open(lock_dir / "host.waiting", os.O_CREAT | os.O_RDWR, 0o644)  # held shared while a job waits to come in
    # held shared by every job from its start to its container's removal (HostHold.keep_tail), alone by a ranked run
    tail = os.open(lock_dir / "host.tail", os.O_CREAT | os.O_RDWR, 0o644)
    tell = waiting or (lambda why: None)
    hold = HostHold(first, gate, fd, marks, tail, ranked)
    try:
        if ranked:
            waited = _lock(first, fcntl.LOCK_EX, lambda: tell("exclusive"), stopped)  # another ranked run (rare: one place a host)
            waited = _lock(gate, fcntl.LOCK_EX, lambda: tell("exclusive"), stopped) or waited
            waited = _lock(fd, fcntl.LOCK_EX, lambda: tell("jobs"), stopped) or waited
            waited = _lock(tail, fcntl.LOCK_EX, lambda: tell("jobs"), stopped) or waited  # and their tails
        elif exclusive:  # stands aside for ranked runs anyway: it does not ask one to let it in
            waited = _alone_after_ranked_runs(first, gate, fd, tell, stopped)
            fcntl.flock(tail, fcntl.LOCK_SH)
        else:
            fcntl.flock(marks, fcntl.LOCK_SH)
            waited = _lock(gate, fcntl.LOCK_SH, lambda: tell("exclusive"), stopped)  # waits while an exclusive job waits or runs
            waited = _lock(fd, fcntl.LOCK_SH, lambda: tell("exclusive"), stopped) or waited
            fcntl.flock(tail, fcntl.LOCK_SH)  # free: a ranked run holding it holds the host too
            fcntl.flock(gate, fcntl.LOCK_UN)
            fcntl.flock(marks, fcntl.LOCK_UN)
        if waited:
            tell(None)
        yield hold
    finally:
        if hold.tail is not None:  # not kept by the job
            os.close(hold.tail)
        os.close(marks)
        os.close(fd)
        os.close(gate)
        os.close(first)


def profiler_lock(lock_dir: Path, gpu: str) -> Path:
    """The lock the profiling commands of the jobs that share one GPU take turns on (issue 38)."""
    return lock_dir / f"gpu{gpu}.profiler.lock"


HANDOFF = 0.5  # a profiler that finds another job's waiting lets it take a free turn first (it polls every 0.1 s)


def _waited_on(fd: int) -> bool:
    """Each waiter holds the waiting file shared: the exclusive lock is refused while one does."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    fcntl.flock(fd, fcntl.LOCK_UN)
    return False


class ProfilerTurn:
    """A held turn: since when, and whether another job's profiling command waits for it. The
    watchdog thread asks while the command's thread may end the turn: one lock, so a closed
    descriptor (its number perhaps reused for another lock file) is never flocked."""

    def __init__(self, waiting_path: Path):
        self.since = time.monotonic()
        self._waiting: int | None = os.open(waiting_path, os.O_CREAT | os.O_RDWR, 0o600)
        self._lock = threading.Lock()

    def others_waiting(self) -> bool:
        with self._lock:
            return self._waiting is not None and _waited_on(self._waiting)

    def close(self) -> None:
        with self._lock:
            if self._waiting is not None:
                os.close(self._waiting)
                self._waiting = None


@contextmanager
def profiler_turn(path: Path, stopped: Callable[[], bool], waiting: Callable[[], None]) -> Iterator[ProfilerTurn | None]:
    """Hold the GPU's profiler lock while the block runs: the turn once held; None when
    ``stopped()`` came first (the command's time ran out, the job was cancelled). ``waiting()``
    hears it once when another job holds it; while it waits it holds the waiting file shared, so
    the holder knows someone waits (``ProfilerTurn.others_waiting``). One that arrives while
    another job already waits does not take the turn from under it: a job running profiler after
    profiler took the lock back ~10 ms after each, before the waiter's next look, and kept it.

    The GPU's driver lets one process collect profiling data at a time; ncu's own lock lives in
    each container's /tmp and its process namespace, so profilers in jobs sharing a GPU did not
    wait for each other and failed ("a driver resource was unavailable"). The worker makes them
    take turns from outside the containers, where no container can reach the lock (the process
    executor's jobs run as the worker's user and can: trusted work only)."""
    waiting_path = path.with_suffix(".waiting")
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    queued = os.open(waiting_path, os.O_CREAT | os.O_RDWR, 0o600)  # held shared while this one waits
    try:
        told = False
        first_try = time.monotonic() + HANDOFF if _waited_on(queued) else 0.0
        while True:
            if time.monotonic() >= first_try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    pass
            if stopped():
                yield None
                return
            with suppress(BlockingIOError):  # not blocking: a holder looks with the exclusive lock for a moment only
                fcntl.flock(queued, fcntl.LOCK_SH | fcntl.LOCK_NB)
            if not told and time.monotonic() >= first_try:
                waiting()
                told = True
            time.sleep(0.1)
        os.close(queued)
        queued = -1
        turn = ProfilerTurn(waiting_path)
        try:
            yield turn
        finally:
            turn.close()
    finally:
        if queued >= 0:
            os.close(queued)
        os.close(fd)


class ShareWatch:
    """How many other jobs ran on a run's GPUs beside it: sampled every second while it runs, so
    what it printed of its own speed can say it was shared (issue 38)."""

    def __init__(self, lock_dir: Path, gpus: list[GpuInfo], gpu_ids: list[str], per_gpu: int, mine: int):
        self.lock_dir, self.per_gpu, self.mine = lock_dir, per_gpu, mine
        self.gpus = [g for g in gpus if str(g.index) in gpu_ids]
        self.most = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True, name="share-watch")

    def others(self) -> int:
        """Other jobs on the busiest of the run's GPUs now (each holds at least one share)."""
        used = occupancy(self.lock_dir, self.gpus, self.per_gpu)
        return max((max(n - self.mine, 0) for n in used.values()), default=0)

    def _sample(self) -> None:
        while not self._stop.wait(1.0):
            self.most = max(self.most, self.others())

    def __enter__(self) -> ShareWatch:
        self.most = self.others()
        if self.per_gpu > 1 and self.gpus:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2)
