"""Issue 46 on the GPU host: examples/ece408-conv's ranked run as the service times it, without the
service around it. rai-timed (built from worker/raiworker/rai-timed.c) runs the course's reference
and then each variant of new-forward.cu on the same inputs, as the job's user, in a cgroup v2 folder
of its own, exactly as the Docker executor does in the timed run's container (there, the container
and root's folder around it; here, the host); the verdict is the server's own
(raiserver.grading.measured.summarize with the course's instructor/final.yml).

    python3 bench/ranked_op_gpu.py        # as root on the GPU host; wheels for pydantic/pyyaml in .whl

Variants (bench/ranked46/*.cu): the honest baseline and the instructors' optimized kernel; skip (no
work); profstop (the work between cudaProfilerStop and cudaProfilerStart: ranked 5.7 us under ncu
before issue 46); sidestream (kernel and copy on a non-blocking stream into page-locked outputs,
returned without waiting); late (a host thread does the GPU work after the end mark); cputhreads
(the convolution on every host core); clonekids (in children the kernel reaps, SIGCHLD ignored);
cpulayer1 (layer 1 on the host, layer 2 on the GPU). Then the honest baseline HONEST_RUNS times for
the noise figure. Figures go to $OUT/ranked46-figures.json and a transcript to $OUT/ranked46.txt.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for part in ("protocol", "server", "worker"):
    sys.path.insert(0, str(ROOT / part))

from raiprotocol.models import MeasuredRun  # noqa: E402
from raiprotocol.spec import parse_course_spec  # noqa: E402
from raiserver.grading.measured import summarize  # noqa: E402
from raiworker.executors.docker.timed_result import TimedResult, parse  # noqa: E402

OUT = Path(os.environ.get("OUT", "/tmp/rai-device-out"))
WORK = Path("/tmp/rb46")
CG_ROOT = next(p for p in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")) if (p / "cgroup.controllers").exists())
CG = CG_ROOT / "rai-bench46"
USER = 65534  # nobody: the job's user
BATCH = os.environ.get("BATCH", "10000")
HONEST_RUNS = int(os.environ.get("HONEST_RUNS", "8"))
SPEC = parse_course_spec((ROOT / "examples/ece408-conv/instructor/final.yml").read_text())
EXAMPLE = ROOT / "examples/ece408-conv"
figures: dict[str, object] = {}
lines: list[str] = []


def say(text: str) -> None:
    print(text, flush=True)
    lines.append(text)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "ranked46.txt").write_text("\n".join(lines) + "\n")
    (OUT / "ranked46-figures.json").write_text(json.dumps(figures, indent=2, default=str))


def sh(cmd: str, cwd: Path | None = None) -> None:
    subprocess.run(cmd, shell=True, check=True, cwd=cwd)


def build() -> dict[str, Path]:
    shutil.rmtree(WORK, ignore_errors=True)
    proj = WORK / "proj"
    shutil.copytree(EXAMPLE, proj)
    sh(f"cc -O2 -static -o {WORK}/rai-timed {ROOT}/worker/raiworker/rai-timed.c")
    sh("make -s m2 ref opt 2>&1 | grep -v warning || true", cwd=proj)
    bins = {"honest": proj / "m2", "ref": proj / "ref", "optimized": proj / "opt"}
    for cu in sorted((ROOT / "bench/ranked46").glob("*.cu")):
        dest = WORK / f"m2-{cu.stem}"
        sh(f"nvcc -O3 -std=c++17 -arch=native -I{proj} -o {dest} {proj}/obj/driver.o {proj}/src/gpu_warmup.cu {cu} -lz -lpthread", cwd=proj)
        bins[cu.stem] = dest
    sh(f"chmod -R a+rX {WORK}")
    return bins


def timed(
    binary: Path,
    keys: tuple[str, str],
    bound: float | None,
    n: list[int] = [0],  # noqa: B006
    env: dict[str, str] | None = None,
    trace: list[str] | None = None,
    helper: Path | None = None,
) -> tuple[TimedResult, float]:
    """One run under rai-timed, as the job's user, in a cgroup of its own (``trace``: its stderr's lines)."""
    n[0] += 1
    job, out = CG / f"r{n[0]}", WORK / f"out{n[0]}"
    job.mkdir()
    out.mkdir(mode=0o700)
    (out / "keys").write_text(f"{keys[0]} {keys[1]}\n")
    argv = [str(helper or WORK / "rai-timed"), "--uid", str(USER), "--gid", str(USER), "--cgroup", str(job), "--out", str(out)]
    argv += ["--secrets", str(out / "keys")] + (["--bound-ms", str(int(bound * 1000))] if bound else [])
    started = time.monotonic()
    res = subprocess.run([*argv, "--", str(binary), BATCH], cwd=WORK, capture_output=True, text=True, env={**os.environ, **(env or {})})
    wall = time.monotonic() - started
    if trace is not None:
        trace += res.stderr.splitlines()
    if res.returncode != 0:
        say(f"    ({binary.name} exited {res.returncode}: {(res.stderr or res.stdout).strip()[-200:]})")
    result = parse((out / "result").read_text()) if (out / "result").exists() else TimedResult(problem="no result")
    for _ in range(100):
        try:
            job.rmdir()
            break
        except OSError:
            time.sleep(0.02)
    return result, wall


def submission(name: str, binary: Path, refbin: Path, gpu: str, repeats: int = 5) -> dict:
    """A ranked submission of ``binary`` as the worker makes it: the reference on each run's keys,
    then the run, 20x the reference's wall time its bound; the server's verdict."""
    started = time.monotonic()
    runs = []
    for _ in range(repeats):
        keys = (secrets.token_hex(16), secrets.token_hex(16))
        ref, ref_wall = timed(refbin, keys, None)
        bound = min(120.0, max(5.0, 20 * ref_wall))
        got, wall = timed(binary, keys, bound)
        problem = got.problem
        if got.bound_ms is not None:
            problem = f"it was stopped at its bound of {bound:.3g} s"
        runs.append(
            MeasuredRun(
                exit_code=got.exit_code if got.exit_code is not None else -1,
                wall_seconds=wall,
                cpu_seconds=got.cpu_seconds,
                problem=problem,
                ops=got.ops,
                reference=ref.ops,
                reference_seconds=ref_wall,
                reference_problem=ref.problem,
                bound_seconds=bound,
            )
        )
        if problem or got.exit_code:
            break
    m = summarize(runs, SPEC, 1, None, gpu, repeats)
    row = {
        "variant": name,
        "op_time": m.op_time,
        "runs": m.runs,
        "cv": m.cv,
        "error": m.error,
        "reference_time": m.reference_time,
        "cpu_seconds": m.cpu_seconds,
        "per_op": [[op.seconds for op in r.ops] for r in runs],
        "problem": m.problem,
        "flags": m.flags,
        "seconds": round(time.monotonic() - started, 1),
    }
    verdict = f"ranked {m.op_time * 1e3:.3f} ms (cv {m.cv:.2%}, error {m.error:.1g})" if m.op_time else f"NOT RANKED: {m.problem}"
    say(f"  {name:11s} {verdict}   cpu {m.cpu_seconds}  {row['seconds']} s")
    return row


def layer_figures(name: str, table: dict[str, list[list[float]]], cols: list[str]) -> None:
    """Per layer (a run's operations are its passes of the two layers, in turn): the mean of each
    column, b = the sd of the runs' means, w = the pooled sd within a run (ms)."""
    ops = sorted((k for k in table if k.startswith("op")), key=lambda k: int(k[2:]))
    for layer in (0, 1):
        mine = [table[k] for k in ops if (int(k[2:]) - 1) % 2 == layer]
        if not mine or len(mine[0]) < 2:
            continue
        parts = []
        for j, col in enumerate(cols):
            runs_vals = [[mine[p][r][j] for p in range(len(mine)) if len(mine[p][r]) > j] for r in range(len(mine[0]))]
            runs_vals = [v for v in runs_vals if v]
            if len(runs_vals) < 2:
                continue
            means = [statistics.fmean(v) for v in runs_vals]
            within = statistics.fmean([statistics.pvariance(v) for v in runs_vals]) ** 0.5
            parts.append(f"{col} {statistics.fmean(means):.2f} b{statistics.pstdev(means):.2f} w{within:.2f}")
        say(f"  {name:6s} layer {layer + 1}: " + "  ".join(parts))


def noise(runs: int) -> None:
    """NOISE=N: the honest baseline with a clock between its phases (bench/ranked46/traced.cu) and
    rai-timed built with -DRAI_TIMED_TRACE, N timed runs per harness, alternating: where each
    operation's time and its spread go (CUDA's allocations, the copies, the kernel, the freeze, the
    outputs' read; "rest": what is left, the inputs' handing over). The harnesses: this tree's, and
    BEFORE's (a git revision, default b998a09: the inputs mapped by the job after the clock started
    and copied to the GPU from pageable memory)."""
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    sh(f"cc -O2 -static -DRAI_TIMED_TRACE -o {WORK}/rai-timed {ROOT}/worker/raiworker/rai-timed.c")
    before = os.environ.get("BEFORE", "b998a09")
    # TIMED_BEFORE=FILE: this tree's harness under two rai-timed, FILE's (an older rai-timed.c) and this tree's
    timed_before = os.environ.get("TIMED_BEFORE")
    helpers = {"now": WORK / "rai-timed"}
    if timed_before:
        sh(f"cc -O2 -static -DRAI_TIMED_TRACE -o {WORK}/rai-timed-before {timed_before}")
        helpers["before"] = WORK / "rai-timed-before"
    # TIMED_ALSO=name=FILE,...: more rai-timed builds (older or trial rai-timed.c), each run beside
    # this tree's with this tree's harness, in turn
    also = dict(item.split("=", 1) for item in os.environ.get("TIMED_ALSO", "").split(",") if item)
    for label, source in also.items():
        sh(f"cc -O2 -static -DRAI_TIMED_TRACE -o {WORK}/rai-timed-{label} {ROOT / source}")
        helpers[label] = WORK / f"rai-timed-{label}"
    cu = ROOT / "bench/ranked46/traced.cu"
    binaries: dict[str, Path] = {}
    # BEFORE=none: this tree's harness only; PASSES=P: each run does the operations P times (ranked.passes)
    for name in ("now",) if before == "none" else ("before", "now"):
        proj = WORK / name
        shutil.copytree(EXAMPLE, proj)
        if name == "before" and not timed_before:
            for f in ("src/rai_op.h", "src/driver.cc", "src/gpu_warmup.cu"):
                show = ["git", "show", f"{before}:examples/ece408-conv/{f}"]
                (proj / f).write_text(subprocess.run(show, cwd=ROOT, capture_output=True, text=True, check=True).stdout)
        sh("make -s obj/driver.o 2>&1 | grep -v warning || true", cwd=proj)
        binaries[name] = proj / "m2-traced"
        objs = f"{proj}/obj/driver.o {proj}/src/gpu_warmup.cu {cu}"
        sh(f"nvcc -O3 -std=c++17 -arch=native -I{proj} -o {binaries[name]} {objs} -lz -lpthread", cwd=proj)
    for label in also:
        binaries[label] = binaries["now"]
    sh(f"chmod -R a+rX {WORK}")
    CG.mkdir(exist_ok=True)
    tables: dict[str, dict[str, list[list[float]]]] = {name: {} for name in binaries}
    try:
        for _ in range(runs):
            for name, binary in binaries.items():
                trace: list[str] = []
                helper = helpers.get(name, helpers["now"])
                passes = {"RAI_OP_PASSES": os.environ["PASSES"]} if os.environ.get("PASSES") else None
                got, _wall = timed(binary, (secrets.token_hex(16), secrets.token_hex(16)), None, trace=trace, helper=helper, env=passes)
                phases = [[float(v) for v in line.split()[2::2]] for line in trace if line.startswith("TRACE ")]
                ends = [[float(v) for v in re.findall(r"([0-9.]+) ms", line)] for line in trace if line.startswith("TIMED op")]
                copies = [float(re.findall(r"([0-9.]+) ms", line)[0]) for line in trace if line.startswith("TIMED begin")]
                total = [0.0]
                for i, op in enumerate(got.ops):
                    row = [op.seconds * 1e3, *phases[i], *ends[i]] if i < len(phases) and i < len(ends) else [op.seconds * 1e3]
                    if len(row) == 8:  # the inputs' copy at begin, where rai-timed says (0: an older one that does not)
                        row.append(copies[i] if i < len(copies) else 0.0)
                        row.append(row[0] - sum(row[1:9]))
                    tables[name].setdefault(f"op{i + 1}", []).append(row)
                    total[0] += op.seconds * 1e3
                tables[name].setdefault("total", []).append(total)
    finally:
        CG.rmdir()
    cols = ["op", "malloc", "h2d", "kernel", "d2h", "free", "freeze", "pages", "copy", "rest"]
    figures["noise"] = tables
    for name, table in tables.items():
        for op, rows in table.items():
            parts = []
            for j, col in enumerate(cols):
                vals = [r[j] for r in rows if len(r) > j]
                if len(vals) > 1:
                    parts.append(f"{col} {statistics.median(vals):.2f}±{statistics.pstdev(vals):.2f}")
            say(f"  {name:6s} {op:5s} ({len(rows)} runs, ms, median±sd): " + "  ".join(parts))
        layer_figures(name, table, cols)
        totals = [r[0] for r in table["total"]]
        # a submission ranks the median of 5 runs: the spread of that median across submissions
        medians = [statistics.median(totals[i : i + 5]) for i in range(0, len(totals) - 4, 5)]
        cv_run = statistics.pstdev(totals) / statistics.fmean(totals)
        cv_sub = statistics.pstdev(medians) / statistics.fmean(medians) if len(medians) > 1 else float("nan")
        say(f"  {name:6s} a run's total: cv {cv_run:.2%}; the median of 5 runs, {len(medians)} such: cv {cv_sub:.2%}")


def main() -> None:
    if os.environ.get("NOISE"):
        noise(int(os.environ["NOISE"]))
        return
    gpu = (
        subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True)
        .stdout.strip()
        .splitlines()[0]
    )
    figures["gpu"] = gpu
    say(f"{gpu}, batch {BATCH}, {os.cpu_count()} cores")
    t0 = time.monotonic()
    bins = build()
    say(f"built rai-timed and {len(bins)} programs in {time.monotonic() - t0:.1f} s")
    CG.mkdir(exist_ok=True)
    try:
        order = ["honest", "optimized", "profstop", "skip", "sidestream", "late", "cputhreads", "clonekids", "cpulayer1"]
        figures["variants"] = [submission(v, bins[v], bins["ref"], gpu) for v in order if v in bins]
        say(f"the honest baseline, {HONEST_RUNS} submissions:")
        honest = [submission("honest", bins["honest"], bins["ref"], gpu) for _ in range(HONEST_RUNS)]
        times = [h["op_time"] for h in honest if h["op_time"]]
        figures["honest"] = honest
        if len(times) > 1:
            figures["honest_cv_across"] = statistics.pstdev(times) / statistics.fmean(times)
            figures["submission_seconds_median"] = statistics.median(h["seconds"] for h in honest)
            say(
                f"honest across submissions: {min(times) * 1e3:.3f}-{max(times) * 1e3:.3f} ms, "
                f"cv {figures['honest_cv_across']:.3%}; a submission's timed runs take {figures['submission_seconds_median']} s (median)"
            )
    finally:
        CG.rmdir()


if __name__ == "__main__":
    main()
