"""Can the log pipeline keep up with a program that prints a lot? In one run, time:
(a) `docker run --rm --network none IMG seq 1 N > /dev/null` directly, and
(b) a job running `seq 1 N` through `raiclient submit`, end to end (worker sink, Redis, server,
    client), client output to a file; then check every line was delivered and stored;
(a') with the Docker executor, (a) again with `docker run -t`: its output on a terminal, one write
    per line, as a job's is (rai runs jobs on a terminal so that their output comes back live);
(a'') (a) again with the program under rai-pty, the terminal a job gets, and nothing of the service:
    the floor that the terminal alone sets.
Prints both times and the ratio b/a (the goal: <= 2).

    .venv/bin/python bench/log_throughput.py [-n 2000000] [--executor docker|process]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from service import project, raid_dev  # noqa: E402

IMAGE = "rai/busybox:latest"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=2_000_000)
    ap.add_argument("--executor", default="docker")
    args = ap.parse_args()
    n = args.n
    with raid_dev(args.executor) as dev:
        dev.student_client()
        if args.executor == "docker":
            direct = ["docker", "run", "--rm", "--network", "none", IMAGE, "seq", "1", str(n)]
        else:  # no engine on this host: the same program on a terminal, straight to /dev/null
            direct = ["script", "-qfec", f"seq 1 {n}", "/dev/null"]
        t0 = time.perf_counter()
        subprocess.run(direct, stdout=subprocess.DEVNULL, check=True)
        a = time.perf_counter() - t0
        a_tty = a_pty = None
        if args.executor == "docker":  # like a job's output: on a terminal, one write per line
            t0 = time.perf_counter()
            subprocess.run([*direct[:2], "-t", *direct[2:]], stdout=subprocess.DEVNULL, check=True)
            a_tty = time.perf_counter() - t0
            from raiworker.terminal import IN_CONTAINER, pty_helper

            helper = pty_helper(dev.tmp / "pty")
            if helper is not None:
                t0 = time.perf_counter()
                subprocess.run(
                    [*direct[:5], "-v", f"{helper}:{IN_CONTAINER}:ro", IMAGE, IN_CONTAINER, *direct[6:]],
                    stdout=subprocess.DEVNULL,
                    check=True,
                )
                a_pty = time.perf_counter() - t0

        proj = project(dev.tmp / "seq", IMAGE, [f"seq 1 {n}"])
        out = dev.tmp / "client.out"
        t0 = time.perf_counter()
        with out.open("wb") as fh:
            res = subprocess.run(dev.client("submit", "-p", str(proj)), env=dev.env, stdout=fh, stderr=subprocess.PIPE)
        b = time.perf_counter() - t0
        if res.returncode != 0:
            raise SystemExit(f"submit failed ({res.returncode}): {res.stderr.decode()[-2000:]}")
        printed = [line for line in out.read_bytes().split(b"\n") if line and not line.startswith("✱".encode())]
        delivered = len(printed) == n and printed[0] == b"1" and printed[-1] == str(n).encode()
        jid = next(line.split()[2].decode() for line in out.read_bytes().split(b"\n") if b"queued on" in line)
        with dev.http() as h:
            text = h.get(f"/api/v1/jobs/{jid}/log.txt").text
        stored = sum(1 for line in text.split("\n") if line and not line.startswith("✱"))
        print(f"(a) {' '.join(direct[:6])} … > /dev/null: {a:.2f} s")
        print(f"(b) raiclient submit of `seq 1 {n}` ({args.executor} executor), end to end: {b:.2f} s ({n / b:,.0f} lines/s)")
        print(f"delivered to the client: {len(printed):,} lines ({'all, in order' if delivered else 'MISSING LINES'}); stored: {stored:,}")
        print(f"ratio b/a: {b / a:.2f}")
        if a_tty is not None:
            print(f"(a') the same with docker run -t (its output on a terminal, as a job's is): {a_tty:.2f} s; ratio b/a': {b / a_tty:.2f}")
        if a_pty is not None:
            print(
                f"(a'') the same under rai-pty, without the service (the terminal's own cost): {a_pty:.2f} s; ratio a''/a: {a_pty / a:.2f}"
            )
        if not delivered or stored != n:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
