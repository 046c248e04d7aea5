"""The similarity comparison itself (issue 36), on code a student would write: a disguised copy
ranks first, the starter code never counts as a match, progress ends at its total, and the
highlighted code is HTML-escaped (a student's file is attacker-controlled)."""

from __future__ import annotations

from pathlib import Path

from raiserver.grading.similarity import Doc, compare, highlight

STARTER = (Path(__file__).resolve().parents[2] / "examples" / "ece408-conv" / "new-forward.cu").read_text()
TILED = """
__global__ void tiled(const float *x, const float *k, float *y, int C, int H, int W, int K) {
  __shared__ float tile[16][16];
  int tx = threadIdx.x, ty = threadIdx.y, row = blockIdx.y * 16 + ty, col = blockIdx.x * 16 + tx;
  float acc = 0.0f;
  for (int c = 0; c < C; ++c) {
    tile[ty][tx] = x[(c * H + row) * W + col];
    __syncthreads();
    for (int p = 0; p < K; ++p) for (int q = 0; q < K; ++q) acc += tile[ty + p][tx + q] * k[(c * K + p) * K + q];
    __syncthreads();
  }
  if (row < H && col < W) y[row * W + col] = acc;
}
"""
UNROLLED = """
__constant__ float weights[4096];
__global__ void unrolled(const float *in, float *out, int n, int K) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float total = 0;
  #pragma unroll 4
  for (int j = 0; j < K * K; j += 1) { total = fmaf(in[i + j % K], weights[j], total); if (total > 1e9f) total = 1e9f; }
  out[i] = total * 0.5f + in[i] / (1.0f + (float)K);
}
"""


def docs() -> list[Doc]:
    copy = TILED.replace("acc", "mySum").replace("tile", "buffer").replace("row", "r").replace("    ", "  ")
    return [
        Doc("alpha", "A", STARTER + TILED),
        Doc("beta", "B", STARTER + "// my own work\n" + copy),
        Doc("gamma", "C", STARTER + UNROLLED),
        Doc("delta", "D", STARTER),
        Doc("eps", "E", STARTER),
    ]


def test_a_disguised_copy_ranks_first_and_the_starter_never_matches():
    seen: list[tuple[str, int, int]] = []
    pairs = compare(docs(), STARTER, lambda phase, done, total: seen.append((phase, done, total)))
    names = [(docs()[p.a].team, docs()[p.b].team) for p in pairs]
    assert names[0] == ("alpha", "beta") and pairs[0].score > 0.8, (names, pairs[0].score)
    assert ("delta", "eps") not in names  # two untouched starters share nothing once it is boilerplate
    assert seen[:5] == [("reading", i, 5) for i in range(1, 6)] and seen[-1] == ("comparing", 10, 10)
    assert [d for _, d, _ in seen[5:]] == sorted(d for _, d, _ in seen[5:])


def test_without_the_starter_the_untouched_copies_are_the_same():
    pairs = compare(docs(), "", lambda *_: None)
    scores = {(docs()[p.a].team, docs()[p.b].team): p.score for p in pairs}
    assert scores[("delta", "eps")] == 1.0


def test_the_highlighted_code_is_escaped():
    code = "int x = 1; // </pre><script>alert(1)</script>\nint y = 2;"
    html = str(highlight(code, [[0], [10]]))
    assert html.startswith("<mark>int x = 1;</mark>") and "<script>" not in html and "&lt;script&gt;" in html
