"""Issue 46 through the whole service on the H100: the server, Redis, the Docker worker and
rai/ece408:cuda13 with the GPU by device nodes (bench/gpu_container.py's setup), the course's
instructor/final.yml installed unchanged, and ranked submissions of variants of new-forward.cu
(bench/ranked46/, each made one self-contained file as a student's would be). Prints each
submission's verdict; figures to $OUT/ranked46-service.json, the client's transcripts beside.

    python3 bench/ranked_service_gpu.py      # as root on the GPU host, .gpu carried (see gpu_container.py)
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_container as gc  # noqa: E402 - the engine, image and service made by its setup step

ROOT, OUT = gc.ROOT, gc.OUT
VARIANTS = ["honest", "cublas", "cputhreads", "sidestream"] + ["honest"] * 7  # 8 honest: the coefficient of variation
if os.environ.get("VARIANTS"):  # a shorter list for one question: VARIANTS=cublas,honest
    VARIANTS = os.environ["VARIANTS"].split(",")
_unknown = sorted({v for v in VARIANTS if v != "honest" and not (Path(__file__).parent / "ranked46" / f"{v}.cu").exists()})
if _unknown:  # found now, not after minutes of device time
    raise SystemExit(f"VARIANTS: no bench/ranked46/<name>.cu for {', '.join(_unknown)}")
# SHAPES=5x1,5x5: the variants once for each shape of the timed runs (R runs of P passes), the course
# installed anew before each (a new version: the board's runs of one shape beside the other's)
SHAPES = [x for x in os.environ.get("SHAPES", "").split(",") if x] or [""]
figures: dict[str, object] = {"submissions": []}


def student_file(variant: str) -> str:
    """new-forward.cu as a student would submit it: one file."""
    if variant == "honest":
        return (ROOT / "examples/ece408-conv/new-forward.cu").read_text()
    common = (ROOT / "bench/ranked46/common.cuh").read_text().replace("#pragma once\n", "")
    return (ROOT / f"bench/ranked46/{variant}.cu").read_text().replace('#include "common.cuh"\n', common)


def course_file(w: Path, shape: str = "") -> Path:
    """The course's final.yml, unchanged; NO_PROFILE=1: without its profiled run (ranked.profile),
    PROFILE=COMMAND: with this one instead;
    ``shape`` "RxP": R timed runs of P passes each (ranked.repeats, ranked.passes) instead of its own."""
    final = ROOT / "examples/ece408-conv/instructor/final.yml"
    if not os.environ.get("NO_PROFILE") and not os.environ.get("PROFILE") and not shape:
        return final
    lines = final.read_text().splitlines()
    if os.environ.get("NO_PROFILE") or os.environ.get("PROFILE"):  # PROFILE: another profiled run's command
        lines = [x for x in lines if not x.strip().startswith("profile:")]
        lines += [f"  profile: {os.environ['PROFILE']}"] if os.environ.get("PROFILE") else []
    if shape:
        repeats, passes = shape.split("x")
        lines = [x for x in lines if not x.strip().startswith(("repeats:", "passes:"))]
        at = lines.index("ranked:") + 1
        lines[at:at] = [f"  repeats: {int(repeats)}", f"  passes: {int(passes)}"]
    w.mkdir(parents=True, exist_ok=True)
    (w / f"final{shape}.yml").write_text("\n".join(lines) + "\n")
    return w / f"final{shape}.yml"


def submit(argv: list[str], env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], list[tuple[float, str]]]:
    """``raiclient submit``, each line of its output stamped as it arrives (where a submission's
    seconds go: the build, the reference runs, each timed run, the profiled run, the verdict)."""
    stamps: list[tuple[float, str]] = []
    with subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        for line in proc.stdout:
            stamps.append((time.monotonic(), line))
        err = proc.stderr.read()
        code = proc.wait(timeout=600)
    return subprocess.CompletedProcess(argv, code, "".join(line for _, line in stamps), err), stamps


def submit_one(i: int, shape: str, variant: str, w: Path, env: dict[str, str]) -> None:
    """One student's submission of ``variant``: its verdict, time and measurement into the figures."""
    client = [sys.executable, "-m", "raiclient"]
    proj = w / f"p{i}"
    shutil.copytree(ROOT / "examples/ece408-conv", proj)
    (proj / "new-forward.cu").write_text(student_file(variant))
    (proj / "report.pdf").write_text("%PDF-1.4 report")
    started = time.monotonic()
    res, stamps = submit([*client, "submit", "-p", str(proj), "--kind", "final"], env)
    took = time.monotonic() - started
    if i < 2 or variant != "honest":  # the device brings back a few files only
        (OUT / f"ranked46-service-{i}-{variant}.txt").write_text(res.stdout + res.stderr)
    with open(OUT / "ranked46-timelines.txt", "a") as timelines:  # seconds since submit, each line
        timelines.write(f"## {i} {shape} {variant}\n" + "".join(f"{t - started:7.2f}  {line}" for t, line in stamps))
    found = re.search(r"Job (\S+) queued", res.stdout)
    job = {}
    if found:
        out = subprocess.run([*client, "status", found.group(1), "--json"], env=env, capture_output=True, text=True, timeout=60).stdout
        job = json.loads(out) if out.strip().startswith("{") else {}
    m = (job.get("results") or {}).get("measured") or {}
    said = ("Ranked #", "Not ranked", "This run: ")  # the last: a run slower than the student's best
    verdict = next((line for line in res.stdout.splitlines() if any(s in line for s in said)), "(no verdict line)")
    library = "; ".join(dict.fromkeys(line.strip()[24:] for line in res.stdout.splitlines() if "cuBLAS in the timed run" in line))
    row = {
        "shape": shape or "final.yml",
        "variant": variant,
        "seconds": round(took, 1),
        "verdict": verdict,
        "op_time": m.get("op_time"),
        "reference": m.get("reference_time"),  # the course's reference on the same inputs, in the same job: the host's state then
        "runs": m.get("runs"),
    }
    row |= {"cv": m.get("cv"), "error": m.get("error"), "cpu": m.get("cpu_seconds"), "problem": m.get("problem")}
    row |= {"inputs_copied_in": m.get("inputs_copied_in"), "gpu_slowed": [f for f in m.get("flags") or [] if "slowed" in f]}
    row |= {"library": library} if library else {}
    kernels = sum(k["ms"] for k in m.get("kernels") or []) / 1e3
    row |= {"flags": m.get("flags"), "kernels": kernels} if m.get("kernels") or m.get("flags") else {}
    figures["submissions"].append(row)  # type: ignore[attr-defined]
    shown = verdict + (f"  [{library}]" if library else "") + f"  inputs copied in: {row['inputs_copied_in']}"
    gc.say(f"{variant:11s} {took:5.1f} s  {shown}  reference {row['reference']}")
    if "kernels" in row:
        gc.say(f"{'':11s} the profiled run's kernels {row['kernels'] * 1e3:.4g} ms; flags: {row['flags']}")
    (OUT / "ranked46-service.json").write_text(json.dumps(figures, indent=2, default=str))


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    gc.setup()
    gc.paths()
    w = Path("/tmp/rai-ranked46")
    env, procs = gc.service(w, secrets.token_hex(16))
    env = {**env, "RAI_PROFILE": f"{w}/alice.profile", "RAI_SERVER": env["RAI_SERVER_URL"]}
    client = [sys.executable, "-m", "raiclient"]
    try:
        for n, shape in enumerate(SHAPES):
            res = subprocess.run(
                [*client, "admin", "course", "install", "final", str(course_file(w, shape))],
                env=env,
                capture_output=True,
                text=True,
            )
            gc.say(res.stdout.strip() or res.stderr.strip())
            for i, variant in enumerate(VARIANTS, n * len(VARIANTS)):
                submit_one(i, shape, variant, w, env)
        for shape in SHAPES:
            name = shape or "final.yml"
            rows = [r for r in figures["submissions"] if r["shape"] == name]  # type: ignore[attr-defined]
            honest = [r["op_time"] for r in rows if r["variant"] == "honest" and r["op_time"]]
            seconds = sorted(r["seconds"] for r in rows)
            got: dict[str, object] = {"median_seconds": statistics.median(seconds)}
            if len(honest) > 1:
                got["honest_cv"] = statistics.pstdev(honest) / statistics.fmean(honest)
                gc.say(f"{name} honest: {honest}, cv {got['honest_cv']:.2%}")
                pairs = [(r["op_time"], r["reference"]) for r in rows if r["variant"] == "honest" and r["op_time"] and r["reference"]]
                if len(pairs) > 2:  # does a submission's offset show in its reference's time too (the host, not the run)?
                    refs = [b for _, b in pairs]
                    got["reference_cv"] = statistics.pstdev(refs) / statistics.fmean(refs)
                    got["op_reference_r"] = statistics.correlation([a for a, _ in pairs], refs)
                    gc.say(f"{name} references: cv {got['reference_cv']:.2%}; op time ~ reference: r = {got['op_reference_r']:.2f}")
            gc.say(f"{name} a submission, submit to verdict: median {got['median_seconds']:.1f} s ({seconds[0]}-{seconds[-1]} s)")
            figures[name] = got
        (OUT / "ranked46-service.json").write_text(json.dumps(figures, indent=2, default=str))
    finally:
        for p in procs:
            p.terminate()
        for log in ("server.log", "worker.log"):
            if (w / log).exists():
                shutil.copy(w / log, OUT / f"ranked46-{log}")


if __name__ == "__main__":
    main()
