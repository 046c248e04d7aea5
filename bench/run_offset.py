"""Where a ranked run's offset comes from (issue 46), on the GPU host: bench/run_offset.cu's runs.

Each process is one run (the course's two layers, ``--passes`` times, on host memory of one kind);
the kinds take turns so that a drift of the machine falls on all of them. For each kind and phase
it prints the mean, the spread of the runs' means (what the passes of one run share) and the spread
within a run, both as a percentage of the mean: the phase whose runs differ is where the offset is,
and a kind of memory without it is the remedy.

    python3 bench/run_offset.py [--runs 12] [--passes 5] [--kinds memfd,thp,hugetlb,host]

Needs root for the huge-page pool and shmem's huge-page advice (it sets both, and says if it cannot).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

PHASES = ("alloc", "copy in", "kernel", "copy out", "free", "op")


def _setup() -> None:
    """A 2 MiB page pool for the hugetlb kind and shmem's huge pages on advice for the thp kind."""
    for path, value in (
        ("/proc/sys/vm/nr_hugepages", "400"),
        ("/sys/kernel/mm/transparent_hugepage/shmem_enabled", "advise"),
    ):
        try:
            Path(path).write_text(value)
            print(f"{path}: {Path(path).read_text().strip()}")
        except OSError as err:
            print(f"{path}: not set ({err})")


def _stats(runs: list[list[float]]) -> tuple[float, float, float]:
    """(mean, sd of the runs' means %, pooled sd within a run %)."""
    means = [statistics.fmean(r) for r in runs]
    mean = statistics.fmean(means)
    between = statistics.stdev(means) / mean * 100 if len(means) > 1 else 0.0
    within_var = statistics.fmean([statistics.variance(r) for r in runs if len(r) > 1])
    return mean, between, within_var**0.5 / mean * 100


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=12)
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--kinds", default="memfd,thp,hugetlb,host")
    args = ap.parse_args()
    exe = "/tmp/run_offset"
    src = Path(__file__).with_name("run_offset.cu")
    root = src.parent.parent
    subprocess.run(["nvcc", "-O2", f"-I{root / 'bench'}", f"-I{root / 'examples/ece408-conv'}", "-o", exe, str(src)], check=True)
    _setup()
    kinds = args.kinds.split(",")
    got: dict[str, list[list[list[float]]]] = {k: [] for k in kinds}
    for r in range(args.runs):
        for kind in kinds:
            p = subprocess.run([exe, kind, str(args.passes)], capture_output=True, text=True, timeout=120)
            if p.returncode:
                print(f"{kind} run {r}: failed: {p.stderr.strip()[-200:]}")
                continue
            passes = [[float(v) for v in line.split()[2:]] for line in p.stdout.splitlines()]
            got[kind].append(passes[1:] if len(passes) > 2 else passes)  # a run's first pass warms up
    print(f"\n{args.runs} runs of {args.passes} passes a kind (the first pass of each left out)")
    print(f"{'kind':11} {'phase':9} {'mean ms':>9} {'between %':>10} {'within %':>9}")
    for kind in kinds:
        if len(got[kind]) < 2:
            continue
        for i, phase in enumerate(PHASES):
            runs = [[p[i] for p in run] for run in got[kind]]
            mean, between, within = _stats(runs)
            print(f"{kind:11} {phase:9} {mean:9.3f} {between:10.2f} {within:9.2f}")
        ops = [statistics.fmean(p[5] for p in run) for run in got[kind]]
        print(f"{kind:11} run means of op: " + " ".join(f"{v:.2f}" for v in ops))
    return 0


if __name__ == "__main__":
    sys.exit(main())
