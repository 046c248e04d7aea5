// m2: YOUR convolution. This baseline is correct and slow; make it fast.
//
// One thread computes one output element, reading everything from global memory.
// Ideas the course covers: shared-memory tiling of the input, weights in constant memory,
// several outputs per thread, unrolling the convolution into a matrix multiply.
#include <cstdio>
#include <cstdlib>

#include "src/conv.h"
#include "src/cuda_check.h"


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

const char *conv_name() { return "gpu-baseline"; }

// The GPU's memory of one layer's shapes, made by conv_prepare before the clock and kept for the
// run: each layer has its own, and a later pass of the same layer reuses it.
struct Memory {
  size_t nx, nk, ny;
  float *dx, *dk, *dy;
};
static Memory held[8];
static int n_held = 0;

static Memory *memory_for(size_t nx, size_t nk, size_t ny) {
  for (int i = 0; i < n_held; ++i)
    if (held[i].nx == nx && held[i].nk == nk && held[i].ny == ny) return &held[i];
  if (n_held == 8) {
    fprintf(stderr, "more than 8 layer shapes\n");
    exit(1);
  }
  Memory &m = held[n_held++];
  m.nx = nx, m.nk = nk, m.ny = ny;
  CUDA_CHECK(cudaMalloc(&m.dx, nx * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&m.dk, nk * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&m.dy, ny * sizeof(float)));
  return &m;
}

static size_t out_size(int B, int M, int H, int W, int K) { return (size_t)B * M * (H - K + 1) * (W - K + 1); }

void conv_prepare(int B, int M, int C, int H, int W, int K) {
  memory_for((size_t)B * C * H * W, (size_t)M * C * K * K, out_size(B, M, H, W, K));
}

double conv_forward(const float *x, const float *k, float *y, int B, int M, int C, int H, int W, int K) {
  const int Ho = H - K + 1, Wo = W - K + 1;
  const size_t nx = (size_t)B * C * H * W, nk = (size_t)M * C * K * K, ny = out_size(B, M, H, W, K);
  Memory *mem = memory_for(nx, nk, ny);
  float *dx = mem->dx, *dk = mem->dk, *dy = mem->dy;
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
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / 1000.0;
}
