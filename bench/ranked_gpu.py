"""Issue 23 on the H100: ranked 'final' runs through the whole service (server, Redis, the Docker
worker, rai/ece408:cuda13 with the GPU by device nodes), timed by ncu from root's side and checked
against labels only the server holds. Prints figures; writes them and transcripts to $OUT.

    python3 bench/ranked_gpu.py            # after `python3 bench/gpu_container.py setup`

It submits the honest example N times (RANKED_RUNS, default 10) for the noise figure (coefficient
of variation of the ranked number across submissions), then three hostile variants of
new-forward.cu: one that prints a fake Op Time and Correctness and renames its kernel to look
like the harness's, one that leaves a background process to overwrite the predictions and the
profiler's reports, and one that skips the convolution (fast, wrong answers).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_container as gc  # noqa: E402 - the engine, image and paths made by its setup step

ROOT, OUT = gc.ROOT, gc.OUT
RUNS = int(os.environ.get("RANKED_RUNS", "10"))
EXAMPLE = ROOT / "examples/ece408-conv"
figures: dict[str, object] = {}


def save() -> None:  # after every submission: a run cut by its time limit still leaves its figures
    (OUT / "ranked-figures.json").write_text(json.dumps(figures, indent=2, default=str))

LIAR = ('__global__ void harness_reference_kernel(', 'printf("Op Time: 0.000001\\nCorrectness: 1.0 Model: ece408\\n");\n  '
        'harness_reference_kernel<<<')
TAMPER = r'''
#include <unistd.h>
static int tamper_once = [] {
  if (fork() == 0) {  // left behind: rewrite the answers and the profiler's reports for 20 s
    setsid();
    for (int i = 0; i < 200; ++i) {
      system("for f in /build/predictions.txt; do yes 0 | head -n 10000 > $f; done 2>/dev/null; "
             "for d in /tmp/rai-measure-*; do echo forged > $d/run1.ncu-rep && echo WROTE-REPORT; done 2>&1 | head -2");
      usleep(100000);
    }
    _exit(0);
  }
  return 0;
}();
'''


def project(name: str, source: str) -> Path:
    p = Path("/tmp/rai-ranked") / name
    shutil.rmtree(p, ignore_errors=True)
    p.mkdir(parents=True)
    (p / "new-forward.cu").write_text(source)
    (p / "report.pdf").write_text("%PDF-1.4 report")
    shutil.copy(EXAMPLE / "rai_build.yml", p / "rai_build.yml")  # theirs: not used for ranked runs
    return p


def main() -> None:
    gc.paths()
    import httpx

    w = Path("/tmp/rai-ranked-svc")
    env, procs = gc.service(w, "ranked-bench-token")
    auth = gc._auth(w)
    cenv = {**env, "RAI_PROFILE": f"{w}/alice.profile"}

    def client(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "raiclient", *args], env=cenv, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)

    def submit(p: Path) -> tuple[dict, str, float]:
        t0 = time.monotonic()
        res = client("submit", "-p", str(p), "--kind", "final")
        took = time.monotonic() - t0
        m = re.search(r"Job (\S+) queued", res.stdout)
        job = httpx.get(f"{env['RAI_SERVER_URL']}/api/v1/jobs/{m.group(1)}", auth=auth, timeout=10).json() if m else {}
        return job, res.stdout, took

    try:
        labels = w / "labels.txt"
        labels.write_text(subprocess.run([sys.executable, str(EXAMPLE / "instructor/labels.py"), str(gc.GPU / "fmnist/t10k-labels-idx1-ubyte.gz")],
                                         capture_output=True, text=True, check=True).stdout)
        res = client("admin", "course", "install", "final", str(EXAMPLE / "instructor/final.yml"), "--labels", str(labels))
        gc.say(res.stdout.strip())
        figures["install"] = res.stdout.strip()
        base = (EXAMPLE / "new-forward.cu").read_text()
        variants = {
            "liar": base.replace("__global__ void conv_forward_kernel(", LIAR[0])
                        .replace("conv_forward_kernel<<<", LIAR[1]),
            "tamper": base + TAMPER,
            "skipper": base.replace("conv_forward_kernel<<<grid, block>>>(dx, dk, dy, B, M, C, H, W, K, tiles_w);",
                                    "/* skipped */"),
        }
        for name, source in variants.items() if os.environ.get("RANKED_HOSTILE", "1") == "1" else ():
            job, out, took = submit(project(name, source))
            m = (job.get("results") or {}).get("measured") or {}
            figures[f"hostile_{name}"] = {k: m.get(k) for k in ("op_time", "accuracy", "flags", "problem", "printed_op_time")}
            figures[f"hostile_{name}"]["state"] = job.get("state")
            figures[f"hostile_{name}"]["report_written"] = "WROTE-REPORT" in out
            (OUT / f"ranked-{name}.txt").write_text(out)
            save()
            gc.say(f"{name}: {figures[f'hostile_{name}']}")
        honest = project("honest", (EXAMPLE / "new-forward.cu").read_text())
        ranked, cvs, spans = [], [], []
        for i in range(RUNS):
            job, out, took = submit(honest)
            m = (job.get("results") or {}).get("measured") or {}
            if i == 0:
                (OUT / "ranked-submit.txt").write_text(out)
                gc.say(out[-4000:])
            if m.get("op_time") is None:
                gc.say(f"run {i + 1}: not measured: {m.get('problem')}\n{out[-3000:]}")
                figures["failed_run"] = out[-6000:]
                break
            ranked.append(m["op_time"])
            cvs.append(m["cv"])
            spans.append(round(took, 1))
            figures["honest_ranked_op_times"], figures["honest_within_job_cv"], figures["submit_seconds"] = ranked, cvs, spans
            save()
            gc.say(f"run {i + 1}: ranked {m['op_time']:.9f} s (runs {m['runs']}, cv {m['cv']:.4%}), accuracy {m['accuracy']}, "
                   f"printed {m.get('printed_op_time')}, flags {m.get('flags')}, {took:.1f} s")
        figures["honest_ranked_op_times"] = ranked
        figures["honest_within_job_cv"] = cvs
        figures["submit_seconds"] = spans
        if len(ranked) > 1:
            cv = statistics.pstdev(ranked) / statistics.fmean(ranked)
            figures["cv_across_submissions"] = round(cv, 6)
            gc.say(f"{len(ranked)} honest submissions: ranked op time median {statistics.median(ranked):.9f} s, "
                   f"CV across submissions {cv:.3%} (goal <= 1%)")
        board = httpx.get(f"{env['RAI_SERVER_URL']}/api/v1/leaderboard", auth=auth, timeout=10).json()
        figures["board"] = [{k: e.get(k) for k in ("rank", "name", "op_time", "correctness", "runs", "spread", "flags")} for e in board]
        gc.say(f"leaderboard: {figures['board']}")
    finally:
        for p in reversed(procs):
            p.terminate()
        time.sleep(1)
        shutil.copy(w / "worker.log", OUT / "ranked-worker.log")


if __name__ == "__main__":
    OUT.mkdir(parents=True, exist_ok=True)
    try:
        main()
    finally:
        save()
