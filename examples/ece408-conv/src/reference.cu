// The course's reference for ranked runs (issue 46): the baseline convolution, frozen here (a
// student's new-forward.cu starts as the same code and changes). Its outputs on each run's inputs
// are what a ranked run's outputs are checked against; it sums in the order of conv.h, so it
// agrees with the CPU's m1 bit for bit.
#include <cstdio>
#include <cstdlib>

#include "conv.h"
#include "cuda_check.h"


#define TILE 16

__global__ void conv_forward_kernel(const float *x, const float *k, float *y, int B, int M, int C, int H, int W, int K,
                                    int tiles_w) {
  const int Ho = H - K + 1, Wo = W - K + 1;
  const int b = blockIdx.z, m = blockIdx.x;
  const int h = (blockIdx.y / tiles_w) * TILE + threadIdx.y;
  const int w = (blockIdx.y % tiles_w) * TILE + threadIdx.x;
  if (h >= Ho || w >= Wo) return;
  float acc = 0.0f;
  for (int c = 0; c < C; ++c)
    for (int p = 0; p < K; ++p)
      for (int q = 0; q < K; ++q)
        acc = fmaf(x[((b * C + c) * H + h + p) * W + w + q], k[((m * C + c) * K + p) * K + q], acc);
  y[((b * M + m) * Ho + h) * Wo + w] = acc;
}

const char *conv_name() { return "gpu-reference"; }

double conv_forward(const float *x, const float *k, float *y, int B, int M, int C, int H, int W, int K) {
  const int Ho = H - K + 1, Wo = W - K + 1;
  const size_t nx = (size_t)B * C * H * W, nk = (size_t)M * C * K * K, ny = (size_t)B * M * Ho * Wo;
  float *dx, *dk, *dy;
  CUDA_CHECK(cudaMalloc(&dx, nx * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&dk, nk * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&dy, ny * sizeof(float)));
  CUDA_CHECK(cudaMemcpy(dx, x, nx * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(dk, k, nk * sizeof(float), cudaMemcpyHostToDevice));

  const int tiles_w = (Wo + TILE - 1) / TILE, tiles_h = (Ho + TILE - 1) / TILE;
  dim3 block(TILE, TILE, 1), grid(M, tiles_w * tiles_h, B);
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  CUDA_CHECK(cudaEventRecord(start));
  conv_forward_kernel<<<grid, block>>>(dx, dk, dy, B, M, C, H, W, K, tiles_w);
  CUDA_CHECK(cudaEventRecord(stop));
  CUDA_CHECK(cudaEventSynchronize(stop));
  CUDA_CHECK(cudaGetLastError());
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));

  CUDA_CHECK(cudaMemcpy(y, dy, ny * sizeof(float), cudaMemcpyDeviceToHost));
  cudaFree(dx);
  cudaFree(dk);
  cudaFree(dy);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / 1000.0;
}
