// The profiler's cross-check (issue 46), C04: GPU work before the clock. Once a layer, conv_prepare (the
// harness's hook before each operation's begin mark, with the shapes but not the inputs) runs the kernel 40
// times on zeros. It gains nothing, since the inputs do not exist yet, and ranks on the baseline's time; the
// profiled run's kernels (~0.3 s) are more than the measured operations can contain, so staff see it flagged.
// (Until 2026-11-29 this work sat in a constructor, which ran before nvcc's own registered the kernel: every
// launch failed unchecked and the variant did nothing before the clock.)
#include "common.cuh"
const char *conv_name() { return "prework"; }
void conv_prepare(int B, int M, int C, int H, int W, int K) {
  const int Ho = H - K + 1, Wo = W - K + 1;
  float *dx, *dk, *dy;
  CUDA_CHECK(cudaMalloc(&dx, (size_t)B * C * H * W * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&dk, (size_t)M * C * K * K * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&dy, (size_t)B * M * Ho * Wo * sizeof(float)));
  CUDA_CHECK(cudaMemset(dx, 0, (size_t)B * C * H * W * sizeof(float)));
  CUDA_CHECK(cudaMemset(dk, 0, (size_t)M * C * K * K * sizeof(float)));
  const int tiles_w = (Wo + TILE - 1) / TILE, tiles_h = (Ho + TILE - 1) / TILE;
  for (int i = 0; i < 40; i++)
    conv_forward_kernel<<<dim3(M, tiles_w * tiles_h, B), dim3(TILE, TILE, 1)>>>(dx, dk, dy, B, M, C, H, W, K, tiles_w);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaFree(dx));
  CUDA_CHECK(cudaFree(dk));
  CUDA_CHECK(cudaFree(dy));
}
double conv_forward(const float *x, const float *k, float *y, int B, int M, int C, int H, int W, int K) {
  conv_gpu(x, k, y, B, M, C, H, W, K, 0, true);
  return 1e-6;
}
