// The honest baseline with a host clock between its phases (stderr): where an operation's time,
// and its run-to-run spread, go (bench/ranked_op_gpu.py noise). The same work as new-forward.cu:
// the GPU's memory made by conv_prepare before the clock, once a layer (TRACED_FRESH=1: made and
// freed inside every operation, as the baseline did before 2026-11-29).
#include <time.h>

#include "common.cuh"

static double now_ms() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

const char *conv_name() { return "traced"; }

struct Held {
  size_t nx, ny;
  float *dx, *dk, *dy;
};
static Held held[8];
static int n_held = 0;
static bool fresh() { return getenv("TRACED_FRESH") != nullptr; }

static Held *memory_for(size_t nx, size_t nk, size_t ny) {
  for (int i = 0; i < n_held; ++i)
    if (held[i].nx == nx && held[i].ny == ny) return &held[i];
  Held &h = held[n_held++ % 8];
  h.nx = nx, h.ny = ny;
  CUDA_CHECK(cudaMalloc(&h.dx, nx * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&h.dk, nk * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&h.dy, ny * sizeof(float)));
  return &h;
}

void conv_prepare(int B, int M, int C, int H, int W, int K) {
  if (!fresh()) memory_for((size_t)B * C * H * W, (size_t)M * C * K * K, (size_t)B * M * (H - K + 1) * (W - K + 1));
}

double conv_forward(const float *x, const float *k, float *y, int B, int M, int C, int H, int W, int K) {
  const int Ho = H - K + 1, Wo = W - K + 1;
  const size_t nx = (size_t)B * C * H * W, nk = (size_t)M * C * K * K, ny = (size_t)B * M * Ho * Wo;
  float *dx, *dk, *dy;
  double t[6];
  t[0] = now_ms();
  if (fresh()) {
    CUDA_CHECK(cudaMalloc(&dx, nx * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&dk, nk * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&dy, ny * sizeof(float)));
  } else {
    Held *h = memory_for(nx, nk, ny);
    dx = h->dx, dk = h->dk, dy = h->dy;
  }
  t[1] = now_ms();
  CUDA_CHECK(cudaMemcpy(dx, x, nx * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(dk, k, nk * sizeof(float), cudaMemcpyHostToDevice));
  t[2] = now_ms();
  const int tiles_w = (Wo + TILE - 1) / TILE, tiles_h = (Ho + TILE - 1) / TILE;
  conv_forward_kernel<<<dim3(M, tiles_w * tiles_h, B), dim3(TILE, TILE, 1)>>>(dx, dk, dy, B, M, C, H, W, K, tiles_w);
  CUDA_CHECK(cudaDeviceSynchronize());
  t[3] = now_ms();
  CUDA_CHECK(cudaMemcpy(y, dy, ny * sizeof(float), cudaMemcpyDeviceToHost));
  t[4] = now_ms();
  if (fresh()) {
    cudaFree(dx);
    cudaFree(dk);
    cudaFree(dy);
  }
  t[5] = now_ms();
  fprintf(stderr, "TRACE malloc %.3f h2d %.3f kernel %.3f d2h %.3f free %.3f\n", t[1] - t[0], t[2] - t[1], t[3] - t[2],
          t[4] - t[3], t[5] - t[4]);
  return (t[3] - t[2]) / 1e3;
}
