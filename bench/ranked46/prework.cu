// The profiler's cross-check (issue 46): GPU work before main (a constructor launching the kernel on
// zeros, 40 times): it gains nothing, since the inputs do not exist yet, and ranks on the baseline's
// time; the profiled run's kernels (~0.3 s) are more than the measured operations can contain, so
// staff see it flagged
#include "common.cuh"
const char *conv_name() { return "prework"; }
__attribute__((constructor)) static void before_main() {
  const int B = 10000, M = 32, C = 16, H = 12, W = 12, K = 5, Ho = H - K + 1, Wo = W - K + 1;
  float *dx, *dk, *dy;
  cudaMalloc(&dx, (size_t)B * C * H * W * sizeof(float));
  cudaMalloc(&dk, (size_t)M * C * K * K * sizeof(float));
  cudaMalloc(&dy, (size_t)B * M * Ho * Wo * sizeof(float));
  cudaMemset(dx, 0, (size_t)B * C * H * W * sizeof(float));
  cudaMemset(dk, 0, (size_t)M * C * K * K * sizeof(float));
  const int tiles_w = (Wo + TILE - 1) / TILE, tiles_h = (Ho + TILE - 1) / TILE;
  for (int i = 0; i < 40; i++)
    conv_forward_kernel<<<dim3(M, tiles_w * tiles_h, B), dim3(TILE, TILE, 1)>>>(dx, dk, dy, B, M, C, H, W, K, tiles_w);
  cudaDeviceSynchronize();
  cudaFree(dx);
  cudaFree(dk);
  cudaFree(dy);
}
double conv_forward(const float *x, const float *k, float *y, int B, int M, int C, int H, int W, int K) {
  conv_gpu(x, k, y, B, M, C, H, W, K, 0, true);
  return 1e-6;
}
