"""Can the log pipeline keep up with a program that prints a lot? In one run, time in turn, round
after round (medians over the rounds; the first round's job starts its own container, later ones
find their slot's spare one, as jobs do on a running service):
(a) `docker run --rm --network none IMG seq 1 N > /dev/null` directly, and
(b) a job running `seq 1 N` through `raiclient submit`, end to end (worker sink, Redis, server,
    client), client output to a file; then check every line was delivered and stored;
and once, with the Docker executor:
(a') (a) again with `docker run -t`: its output on a terminal, one write per line, as a job's is
    (rai runs jobs on a terminal so that their output comes back live);
(a'') (a) again with the program under rai-pty, the terminal a job gets, and nothing of the service:
    what the terminal alone costs.
Prints each round, the median ratio b/a (issue 38's goal: <= 1.4) and its range.

    .venv/bin/python bench/log_throughput.py [-n 2000000] [--rounds 5] [--executor docker|process] [--dev-client]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from service import project, raid_dev  # noqa: E402

IMAGE = "rai/busybox:latest"


def submit_seq(dev, proj: Path, n: int) -> float:
    """(b) once: the time to the client's exit; every line delivered, in order, and stored."""
    out = dev.tmp / "client.out"
    t0 = time.perf_counter()
    with out.open("wb") as fh:
        res = subprocess.run(dev.client("submit", "-p", str(proj)), env=dev.env, stdout=fh, stderr=subprocess.PIPE)
    took = time.perf_counter() - t0
    if res.returncode != 0:
        raise SystemExit(f"submit failed ({res.returncode}): {res.stderr.decode()[-2000:]}")
    printed = [line for line in out.read_bytes().split(b"\n") if line and not line.startswith("✱".encode())]
    delivered = len(printed) == n and printed[0] == b"1" and printed[-1] == str(n).encode()
    jid = next(line.split()[2].decode() for line in out.read_bytes().split(b"\n") if b"queued on" in line)
    with dev.http() as h:
        text = h.get(f"/api/v1/jobs/{jid}/log.txt").text
    stored = sum(1 for line in text.split("\n") if line and not line.startswith("✱"))
    if not delivered or stored != n:
        how = "in order" if delivered else "MISSING LINES"
        raise SystemExit(f"job {jid}: delivered {len(printed):,} lines ({how}), stored {stored:,} of {n:,}")
    return took


def timed(args: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(args, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=2_000_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--executor", default="docker")
    ap.add_argument("--dev-client", action="store_true", help="raiclient from this environment, not installed as students do")
    args = ap.parse_args()
    n = args.n
    with raid_dev(args.executor) as dev:
        if not args.dev_client:
            dev.student_client()
        if args.executor == "docker":
            direct = ["docker", "run", "--rm", "--network", "none", IMAGE, "seq", "1", str(n)]
        else:  # no engine on this host: the same program on a terminal, straight to /dev/null
            direct = ["script", "-qfec", f"seq 1 {n}", "/dev/null"]
        proj = project(dev.tmp / "seq", IMAGE, [f"seq 1 {n}"])
        rounds: list[tuple[float, float]] = []
        for k in range(1, args.rounds + 1):
            a = timed(direct)
            b = submit_seq(dev, proj, n)
            rounds.append((a, b))
            own = "  (its own container)" if k == 1 else ""
            print(f"round {k}: (a) {a:.2f} s  (b) {b:.2f} s ({n / b:,.0f} lines/s)  b/a {b / a:.2f}{own}")
        a_med = statistics.median(a for a, _ in rounds)
        b_med = statistics.median(b for _, b in rounds)
        print(f"(a) {' '.join(direct[:6])} … > /dev/null: median {a_med:.2f} s")
        print(f"(b) raiclient submit of `seq 1 {n}` ({args.executor} executor), end to end: median {b_med:.2f} s")
        print(f"every job: {n:,} lines delivered to the client in order, and stored")
        ratios = sorted(b / a for a, b in rounds)
        print(f"ratio b/a: median {statistics.median(ratios):.2f} over {len(rounds)} rounds (range {ratios[0]:.2f}-{ratios[-1]:.2f})")
        if args.executor != "docker":
            return
        a_tty = timed([*direct[:2], "-t", *direct[2:]])  # like a job's output: on a terminal, one write per line
        print(f"(a') the same with docker run -t (its output on a terminal, as a job's is): {a_tty:.2f} s; ratio b/a': {b_med / a_tty:.2f}")
        from raiworker.terminal import IN_CONTAINER, pty_helper

        helper = pty_helper(dev.tmp / "pty")
        if helper is not None:
            a_pty = timed([*direct[:5], "-v", f"{helper}:{IN_CONTAINER}:ro", IMAGE, IN_CONTAINER, *direct[6:]])
            print(f"(a'') the same under rai-pty, without the service (the terminal's own cost): {a_pty:.2f} s", end="")
            print(f"; ratio a''/a: {a_pty / a_med:.2f}")


if __name__ == "__main__":
    main()
