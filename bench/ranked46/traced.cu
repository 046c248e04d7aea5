// The honest baseline with a host clock between its phases (stderr): where an operation's time,
// and its run-to-run spread, go (bench/ranked_op_gpu.py noise). The same work as new-forward.cu.
#include <time.h>

#include "common.cuh"

static double now_ms() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

const char *conv_name() { return "traced"; }

double conv_forward(const float *x, const float *k, float *y, int B, int M, int C, int H, int W, int K) {
  const int Ho = H - K + 1, Wo = W - K + 1;
  const size_t nx = (size_t)B * C * H * W, nk = (size_t)M * C * K * K, ny = (size_t)B * M * Ho * Wo;
  float *dx, *dk, *dy;
  double t[6];
  t[0] = now_ms();
  CUDA_CHECK(cudaMalloc(&dx, nx * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&dk, nk * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&dy, ny * sizeof(float)));
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
  cudaFree(dx);
  cudaFree(dk);
  cudaFree(dy);
  t[5] = now_ms();
  fprintf(stderr, "TRACE malloc %.3f h2d %.3f kernel %.3f d2h %.3f free %.3f\n", t[1] - t[0], t[2] - t[1], t[3] - t[2],
          t[4] - t[3], t[5] - t[4]);
  return (t[3] - t[2]) / 1e3;
}
