"""Issue 23 on the H100: ranked 'final' runs through the whole service (server, Redis, the Docker
worker, rai/ece408:cuda13 with the GPU by device nodes), timed by ncu from root's side and checked
against labels only the server holds. Prints figures; writes them and transcripts to $OUT.

    python3 bench/ranked_gpu.py            # after `python3 bench/gpu_container.py setup`

It submits the honest example once (its CPU time sets the course's budget, CPU_BUDGET or 1.5x
plus 2 s), then hostile variants of new-forward.cu (RANKED_HOSTILE=0: none): issue 23's liar
(fake printed figures, a kernel renamed like the harness's), tamper (a background process
rewriting the answers and the profiler's reports) and skipper (fast, wrong answers); issue 32's
cpu (the convolution on the host's cores, one trivial kernel), hidden and hidden-setsid (the real
kernel in a helper started by a raw execve with an empty environment, plainly or after a double
fork and setsid, so ncu never sees it), cache (the build's ./m2 leaves its answers for the timed
runs) and late (the timed command exits at once; a child computes and writes the answers after).
Then the honest example N more times (RANKED_RUNS, default 10) for the noise figure (coefficient
of variation of the ranked number across submissions).
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


LIAR = (
    "__global__ void harness_reference_kernel(",
    'printf("Op Time: 0.000001\\nCorrectness: 1.0 Model: ece408\\n");\n  harness_reference_kernel<<<',
)
TAMPER = r"""
#include <unistd.h>
static int tamper_once = [] {
  if (fork() == 0) {  // left behind: rewrite the answers and the profiler's reports for 20 s
    setsid();
    for (int i = 0; i < 200; ++i) {
      system("for f in /build/predictions.txt; do yes 0 | head -n 10000 > $f; done 2>/dev/null; "
             "for d in /tmp/rai-measure-* /opt/rai/measure; do echo forged > $d/run1.ncu-rep && echo WROTE-REPORT; done 2>&1 | head -2");
      usleep(100000);
    }
    _exit(0);
  }
  return 0;
}();
"""


# issue 32: the convolution on the host's cores; one trivial kernel, so the run "used the GPU"
CPU = r"""
#include <thread>
#include <vector>
#include <cmath>
#include "src/conv.h"
#include "src/cuda_check.h"
__global__ void conv_forward_kernel(float *y) { if (threadIdx.x == 1234) y[0] = 0; }
const char *conv_name() { return "gpu-baseline"; }
double conv_forward(const float *x, const float *k, float *y, int B, int M, int C, int H, int W, int K) {
  const int Ho = H - K + 1, Wo = W - K + 1;
  unsigned n = std::thread::hardware_concurrency();
  if (n == 0) n = 4;
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < n; ++t)
    pool.emplace_back([=] {
      for (int b = (int)t; b < B; b += (int)n)
        for (int m = 0; m < M; ++m)
          for (int h = 0; h < Ho; ++h)
            for (int w = 0; w < Wo; ++w) {
              float acc = 0.0f;
              for (int c = 0; c < C; ++c)
                for (int p = 0; p < K; ++p)
                  for (int q = 0; q < K; ++q)
                    acc = std::fma(x[((b * C + c) * H + h + p) * W + w + q], k[((m * C + c) * K + p) * K + q], acc);
              y[((b * M + m) * Ho + h) * Wo + w] = acc;
            }
    });
  for (auto &t : pool) t.join();
  float *d;
  CUDA_CHECK(cudaMalloc(&d, sizeof(float)));
  conv_forward_kernel<<<1, 32>>>(d);
  CUDA_CHECK(cudaDeviceSynchronize());
  cudaFree(d);
  return 5.7e-6;
}
"""

# issue 32: the real kernel in a helper the profiler never sees: the same binary started again by a
# raw execve syscall with ncu's injection variables removed from its environment, plainly or after
# a double fork and setsid; the helper's first conv_forward computes from files in /tmp and exits
HIDDEN = r"""
#include <fcntl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cstring>
#include <vector>
extern char **environ;
static void spill(const char *path, const void *p, size_t n) { int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600); write(fd, p, n); close(fd); }
static void slurp(const char *path, void *p, size_t n) { int fd = open(path, O_RDONLY); size_t got = 0; while (got < n) { ssize_t r = read(fd, (char *)p + got, n - got); if (r <= 0) break; got += r; } close(fd); }
static void helper_compute() {
  int dims[7];
  slurp("/tmp/h.dims", dims, sizeof dims);
  const int B = dims[0], M = dims[1], C = dims[2], H = dims[3], W = dims[4], K = dims[5], Ho = H - K + 1, Wo = W - K + 1;
  size_t nx = (size_t)B * C * H * W, nk = (size_t)M * C * K * K, ny = (size_t)B * M * Ho * Wo;
  std::vector<float> x(nx), k(nk), y(ny);
  float *dx, *dk, *dy;
  slurp("/tmp/h.x", x.data(), nx * 4); slurp("/tmp/h.k", k.data(), nk * 4);
  cudaMalloc(&dx, nx * 4); cudaMalloc(&dk, nk * 4); cudaMalloc(&dy, ny * 4);
  cudaMemcpy(dx, x.data(), nx * 4, cudaMemcpyHostToDevice); cudaMemcpy(dk, k.data(), nk * 4, cudaMemcpyHostToDevice);
  const int tiles_w = (Wo + TILE - 1) / TILE, tiles_h = (Ho + TILE - 1) / TILE;
  dim3 block(TILE, TILE, 1), grid(M, tiles_w * tiles_h, B);
  conv_forward_kernel<<<grid, block>>>(dx, dk, dy, B, M, C, H, W, K, tiles_w);
  cudaMemcpy(y.data(), dy, ny * 4, cudaMemcpyDeviceToHost);
  spill("/tmp/h.y.part", y.data(), ny * 4);
  rename("/tmp/h.y.part", "/tmp/h.y");
  _exit(0);
}
__global__ void visible_kernel(float *y) { if (threadIdx.x == 1234) y[0] = 0; }
double hidden_forward(const float *x, const float *k, float *y, int B, int M, int C, int H, int W, int K) {
  if (getenv("RAI_HIDDEN_HELPER")) helper_compute();
  const int Ho = H - K + 1, Wo = W - K + 1;
  int dims[7] = {B, M, C, H, W, K, 0};
  spill("/tmp/h.dims", dims, sizeof dims);
  spill("/tmp/h.x", x, (size_t)B * C * H * W * 4);
  spill("/tmp/h.k", k, (size_t)M * C * K * K * 4);
  unlink("/tmp/h.y");
  std::vector<char *> env;
  static char flag[] = "RAI_HIDDEN_HELPER=1";
  env.push_back(flag);
  for (char **e = environ; *e; ++e)  // everything but what makes the profiler follow a process
    if (strncmp(*e, "CUDA_INJECTION", 14) && strncmp(*e, "NV_", 3) && strncmp(*e, "NSYS", 4) && strncmp(*e, "LD_PRELOAD", 10)
        && strncmp(*e, "NVTX", 4)) env.push_back(*e);
  env.push_back(nullptr);
  pid_t p = fork();
  if (p == 0) {
    if (DETACH) { setsid(); if (fork() != 0) _exit(0); }
    char self[] = "/proc/self/exe", one[] = "1";
    char *argv[] = {self, one, nullptr};
    syscall(SYS_execve, self, argv, env.data());
    _exit(127);
  }
  waitpid(p, nullptr, 0);
  for (int i = 0; i < 3000 && access("/tmp/h.y", F_OK) != 0; ++i) usleep(10000);
  slurp("/tmp/h.y", y, (size_t)B * M * Ho * Wo * 4);
  float *d;
  cudaMalloc(&d, 4);
  visible_kernel<<<1, 32>>>(d);
  cudaDeviceSynchronize();
  cudaFree(d);
  return 6.0e-6;
}
"""

# issue 32: the build's own ./m2 10000 (student code) leaves the network's outputs; timed runs use them
CACHE = r"""
#include <fcntl.h>
#include <unistd.h>
static int cache_calls = 0;
__global__ void cache_hit_kernel(float *y) { if (threadIdx.x == 1234) y[0] = 0; }
static double cache_hit() {  // one trivial kernel: the run "used the GPU"
  float *d;
  cudaMalloc(&d, 4);
  cache_hit_kernel<<<1, 32>>>(d);
  cudaDeviceSynchronize();
  cudaFree(d);
  return 1e-6;
}
double cached_forward(const float *x, const float *k, float *y, int B, int M, int C, int H, int W, int K) {
  const size_t ny = (size_t)B * M * (H - K + 1) * (W - K + 1) * 4;
  char path[64];
  snprintf(path, sizeof path, "/build/.cache%d", cache_calls++);
  int fd = open(path, O_RDONLY);
  if (fd >= 0) { size_t got = 0; while (got < ny) { ssize_t r = read(fd, (char *)y + got, ny - got); if (r <= 0) break; got += r; } close(fd); if (got == ny) return cache_hit(); }
  double t = real_forward(x, k, y, B, M, C, H, W, K);
  fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) { write(fd, y, ny); close(fd); }
  return t;
}
"""

# issue 32: the timed command exits at once; a child it forked goes on, computes on the GPU, and
# writes the answers after the end
LATE = r"""
#include <unistd.h>
static int late_forked = [] { if (fork() != 0) _exit(0); return 0; }();
"""


def project(name: str, source: str) -> Path:
    p = Path("/tmp/rai-ranked") / name
    shutil.rmtree(p, ignore_errors=True)
    p.mkdir(parents=True)
    (p / "new-forward.cu").write_text(source)
    (p / "report.pdf").write_text("%PDF-1.4 report")
    shutil.copy(EXAMPLE / "rai_build.yml", p / "rai_build.yml")  # theirs: not used for ranked runs
    return p


def hidden(base: str, detach: bool) -> str:
    """The baseline whose conv_forward hands the real kernel to a helper the profiler never sees."""
    return (
        base.replace("double conv_forward(", "double unused_forward(")
        + f"#define DETACH {int(detach)}\n"
        + HIDDEN
        + "double conv_forward(const float *x, const float *k, float *y, int B, int M, int C, int H, int W, int K) "
        "{ return hidden_forward(x, k, y, B, M, C, H, W, K); }\n"
    )


def install(client, course_file: str, labels: Path, budget: float | None) -> None:
    """The course's final.yml, with the CPU budget measured here (None: none)."""
    text = re.sub(r"\n  cpu_seconds: .*\n", f"\n  cpu_seconds: {budget}\n" if budget else "\n", course_file)
    path = Path("/tmp/rai-ranked-final.yml")
    path.write_text(text)
    res = client("admin", "course", "install", "final", str(path), "--labels", str(labels))
    gc.say(res.stdout.strip())
    figures[f"install_budget_{budget}"] = res.stdout.strip()


def main() -> None:
    gc.paths()
    import httpx

    w = Path("/tmp/rai-ranked-svc")
    env, procs = gc.service(w, "ranked-bench-token")
    auth = gc._auth(w)
    cenv = {**env, "RAI_PROFILE": f"{w}/alice.profile"}

    def client(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "raiclient", *args], env=cenv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )

    def submit(p: Path) -> tuple[dict, str, float]:
        t0 = time.monotonic()
        res = client("submit", "-p", str(p), "--kind", "final")
        took = time.monotonic() - t0
        m = re.search(r"Job (\S+) queued", res.stdout)
        job = httpx.get(f"{env['RAI_SERVER_URL']}/api/v1/jobs/{m.group(1)}", auth=auth, timeout=10).json() if m else {}
        return job, res.stdout, took

    try:
        labels = w / "labels.txt"
        labels.write_text(
            subprocess.run(
                [sys.executable, str(EXAMPLE / "instructor/labels.py"), str(gc.GPU / "fmnist/t10k-labels-idx1-ubyte.gz")],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        course_file = (EXAMPLE / "instructor/final.yml").read_text()
        install(client, course_file, labels, None)
        # the honest run's CPU time sets the budget (issue 32): the course's own figure, measured here
        job, out, took = submit(project("honest", (EXAMPLE / "new-forward.cu").read_text()))
        m = (job.get("results") or {}).get("measured") or {}
        figures["honest_first"] = {k: m.get(k) for k in ("op_time", "accuracy", "cpu_seconds", "problem", "verdict", "runs")}
        figures["honest_first_seconds"] = round(took, 1)
        gc.say(f"honest: {figures['honest_first']} in {took:.1f} s")
        cpus = m.get("cpu_seconds") or [0.0]
        budget = float(os.environ.get("CPU_BUDGET") or round(max(cpus) * 1.5 + 2, 1))
        figures["cpu_budget"] = budget
        install(client, course_file, labels, budget)
        base = (EXAMPLE / "new-forward.cu").read_text()
        variants = {
            "liar": base.replace("__global__ void conv_forward_kernel(", LIAR[0]).replace("conv_forward_kernel<<<", LIAR[1]),
            "tamper": base + TAMPER,
            "skipper": base.replace("conv_forward_kernel<<<grid, block>>>(dx, dk, dy, B, M, C, H, W, K, tiles_w);", "/* skipped */"),
            "cpu": CPU,
            "hidden": hidden(base, detach=False),
            "hidden-setsid": hidden(base, detach=True),
            "cache": base.replace("double conv_forward(", "double real_forward(")
            + CACHE
            + "double conv_forward(const float *x, const float *k, float *y, int B, int M, int C, int H, int W, int K) "
            "{ return cached_forward(x, k, y, B, M, C, H, W, K); }\n",
            "late": base + LATE,
        }
        only = [v for v in os.environ.get("RANKED_ONLY", "").split(",") if v]
        variants = {k: v for k, v in variants.items() if not only or k in only}
        for name, source in variants.items() if os.environ.get("RANKED_HOSTILE", "1") == "1" else ():
            job, out, took = submit(project(name, source))
            m = (job.get("results") or {}).get("measured") or {}
            figures[f"hostile_{name}"] = {
                k: m.get(k) for k in ("op_time", "accuracy", "flags", "problem", "printed_op_time", "verdict", "cpu_seconds", "runs")
            }
            figures[f"hostile_{name}"]["seconds"] = round(took, 1)
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
            figures.setdefault("honest_cpu_seconds", []).append(m.get("cpu_seconds"))
            figures.setdefault("honest_verdicts", []).append(m.get("verdict"))
            cvs.append(m["cv"])
            spans.append(round(took, 1))
            figures["honest_ranked_op_times"], figures["honest_within_job_cv"], figures["submit_seconds"] = ranked, cvs, spans
            save()
            gc.say(
                f"run {i + 1}: ranked {m['op_time']:.9f} s (runs {m['runs']}, cv {m['cv']:.4%}), accuracy {m['accuracy']}, "
                f"printed {m.get('printed_op_time')}, flags {m.get('flags')}, {took:.1f} s"
            )
        figures["honest_ranked_op_times"] = ranked
        figures["honest_within_job_cv"] = cvs
        figures["submit_seconds"] = spans
        if len(ranked) > 1:
            cv = statistics.pstdev(ranked) / statistics.fmean(ranked)
            figures["cv_across_submissions"] = round(cv, 6)
            gc.say(
                f"{len(ranked)} honest submissions: ranked op time median {statistics.median(ranked):.9f} s, "
                f"CV across submissions {cv:.3%} (goal <= 1%)"
            )
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
