// The baseline kernel, shared by the variants below (each changes what is around it).
#pragma once
#include <cstdio>
#include <cstdlib>

#include "src/conv.h"
#include "src/cuda_check.h"

#define TILE 16
__global__ void conv_forward_kernel(const float *x, const float *k, float *y, int B, int M, int C, int H, int W, int K, int tiles_w) {
  const int Ho = H - K + 1, Wo = W - K + 1;
  const int b = blockIdx.z, m = blockIdx.x;
  const int h = (blockIdx.y / tiles_w) * TILE + threadIdx.y;
  const int w = (blockIdx.y % tiles_w) * TILE + threadIdx.x;
  if (h >= Ho || w >= Wo) return;
  float acc = 0.0f;
  for (int c = 0; c < C; ++c)
    for (int p = 0; p < K; ++p)
      for (int q = 0; q < K; ++q) acc = fmaf(x[((b * C + c) * H + h + p) * W + w + q], k[((m * C + c) * K + p) * K + q], acc);
  y[((b * M + m) * Ho + h) * Wo + w] = acc;
}

// the convolution on the host, rows [b0, b1) of the batch, in the kernel's order (the same sums)
static void conv_host(const float *x, const float *k, float *y, int b0, int b1, int M, int C, int H, int W, int K) {
  const int Ho = H - K + 1, Wo = W - K + 1;
  for (int b = b0; b < b1; ++b)
    for (int m = 0; m < M; ++m)
      for (int h = 0; h < Ho; ++h)
        for (int w = 0; w < Wo; ++w) {
          float acc = 0.0f;
          for (int c = 0; c < C; ++c)
            for (int p = 0; p < K; ++p)
              for (int q = 0; q < K; ++q) acc = fmaf(x[((b * C + c) * H + h + p) * W + w + q], k[((m * C + c) * K + p) * K + q], acc);
          y[((b * M + m) * Ho + h) * Wo + w] = acc;
        }
}

// the GPU convolution on `stream`; with `sync` false it returns while the copy back may still run
static void conv_gpu(const float *x, const float *k, float *y, int B, int M, int C, int H, int W, int K, cudaStream_t stream, bool sync) {
  const int Ho = H - K + 1, Wo = W - K + 1;
  const size_t nx = (size_t)B * C * H * W, nk = (size_t)M * C * K * K, ny = (size_t)B * M * Ho * Wo;
  float *dx, *dk, *dy;
  CUDA_CHECK(cudaMalloc(&dx, nx * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&dk, nk * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&dy, ny * sizeof(float)));
  CUDA_CHECK(cudaMemcpy(dx, x, nx * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(dk, k, nk * sizeof(float), cudaMemcpyHostToDevice));
  const int tiles_w = (Wo + TILE - 1) / TILE, tiles_h = (Ho + TILE - 1) / TILE;
  conv_forward_kernel<<<dim3(M, tiles_w * tiles_h, B), dim3(TILE, TILE, 1), 0, stream>>>(dx, dk, dy, B, M, C, H, W, K, tiles_w);
  CUDA_CHECK(cudaMemcpyAsync(y, dy, ny * sizeof(float), cudaMemcpyDeviceToHost, stream));
  if (sync) {
    CUDA_CHECK(cudaStreamSynchronize(stream));
    cudaFree(dx);
    cudaFree(dk);
    cudaFree(dy);
  }
}
