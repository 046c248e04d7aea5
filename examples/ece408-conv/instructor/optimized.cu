// The course's optimized reference convolution (for instructors: keep it out of students' hands).
//
// A block stages whole input images and all the layer's weights in shared memory and computes every
// output channel of those images: each thread owns one output position and keeps one accumulator
// per output channel (registers), so each input value read from shared memory feeds M fused
// multiply-adds, and the weights, stored channel-last, arrive four at a time as broadcast float4
// reads. The sum for each output is still taken in the order c, p, q with fmaf, so the result
// equals the CPU reference bit for bit.
#include <cstdio>
#include <cstdlib>

#include "../src/conv.h"
#include "../src/cuda_check.h"


#define MAX_WEIGHTS 16384
__constant__ float c_k[MAX_WEIGHTS];  // used by the generic fallback

// w_t: weights as [C][K][K][M] (channel-last), so the M weights of one tap are contiguous
template <int M, int K>
__global__ void conv_shared_kernel(const float *__restrict__ x, const float *__restrict__ w_t, float *__restrict__ y,
                                   int B, int C, int H, int W, int imgs) {
  extern __shared__ float4 s_mem[];
  float *s_w = reinterpret_cast<float *>(s_mem);
  const int n_w = C * K * K * M;
  float *s_x = s_w + n_w;
  const int Ho = H - K + 1, Wo = W - K + 1, plane = H * W, per_img = C * plane;
  const int b0 = blockIdx.x * imgs;
  const int n_imgs = min(imgs, B - b0);
  for (int i = threadIdx.x; i < n_w / 4; i += blockDim.x) s_mem[i] = reinterpret_cast<const float4 *>(w_t)[i];
  const float *src = x + (size_t)b0 * per_img;
  for (int i = threadIdx.x; i < n_imgs * per_img; i += blockDim.x) s_x[i] = src[i];
  __syncthreads();

  const int outs = Ho * Wo;
  const int img = threadIdx.x / outs, pos = threadIdx.x % outs;
  if (img >= n_imgs) return;
  const int h = pos / Wo, w = pos % Wo;
  const float *xi = s_x + img * per_img + h * W + w;
  float acc[M];
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = 0.0f;
  for (int c = 0; c < C; ++c) {
    const float *xc = xi + c * plane;
    const float4 *wc = reinterpret_cast<const float4 *>(s_w + c * K * K * M);
#pragma unroll
    for (int p = 0; p < K; ++p)
#pragma unroll
      for (int q = 0; q < K; ++q) {
        const float v = xc[p * W + q];
        const float4 *wt = wc + (p * K + q) * (M / 4);
#pragma unroll
        for (int m4 = 0; m4 < M / 4; ++m4) {
          const float4 k4 = wt[m4];
          acc[4 * m4 + 0] = fmaf(v, k4.x, acc[4 * m4 + 0]);
          acc[4 * m4 + 1] = fmaf(v, k4.y, acc[4 * m4 + 1]);
          acc[4 * m4 + 2] = fmaf(v, k4.z, acc[4 * m4 + 2]);
          acc[4 * m4 + 3] = fmaf(v, k4.w, acc[4 * m4 + 3]);
        }
      }
  }
  float *yo = y + (size_t)(b0 + img) * M * outs + pos;
#pragma unroll
  for (int m = 0; m < M; ++m) yo[m * outs] = acc[m];
}

// Any shape the specialised kernel does not cover: one thread an output, weights from constant memory.
__global__ void conv_generic_kernel(const float *x, float *y, int B, int M, int C, int H, int W, int K) {
  const int Ho = H - K + 1, Wo = W - K + 1;
  const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= (size_t)B * M * Ho * Wo) return;
  const int w = idx % Wo, h = (idx / Wo) % Ho, m = (idx / ((size_t)Wo * Ho)) % M, b = idx / ((size_t)Wo * Ho * M);
  float acc = 0.0f;
  for (int c = 0; c < C; ++c)
    for (int p = 0; p < K; ++p)
      for (int q = 0; q < K; ++q) acc = fmaf(x[((b * C + c) * H + h + p) * W + w + q], c_k[((m * C + c) * K + p) * K + q], acc);
  y[idx] = acc;
}

const char *conv_name() { return "gpu-optimized"; }

template <int M, int K>
static void launch(const float *dx, const float *dw_t, float *dy, int B, int C, int H, int W) {
  const int outs = (H - K + 1) * (W - K + 1);
  const int imgs = outs >= 256 ? 1 : 256 / outs;
  const size_t shared = ((size_t)C * K * K * M + (size_t)imgs * C * H * W) * sizeof(float);
  if (shared > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(conv_shared_kernel<M, K>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared));
  conv_shared_kernel<M, K><<<(B + imgs - 1) / imgs, imgs * outs, shared>>>(dx, dw_t, dy, B, C, H, W, imgs);
}

double conv_forward(const float *x, const float *k, float *y, int B, int M, int C, int H, int W, int K) {
  const int Ho = H - K + 1, Wo = W - K + 1;
  const size_t nx = (size_t)B * C * H * W, nk = (size_t)M * C * K * K, ny = (size_t)B * M * Ho * Wo;
  if (nk > MAX_WEIGHTS) {
    fprintf(stderr, "optimized conv: %zu weights do not fit in constant memory\n", nk);
    exit(1);
  }
  // weights channel-last ([C][K][K][M]) for the shared-memory kernel: a one-off layout change
  float *k_t = (float *)malloc(nk * sizeof(float));
  for (int m = 0; m < M; ++m)
    for (int c = 0; c < C; ++c)
      for (int pq = 0; pq < K * K; ++pq) k_t[(c * K * K + pq) * M + m] = k[(m * C + c) * K * K + pq];
  float *dx, *dy, *dw_t;
  CUDA_CHECK(cudaMalloc(&dx, nx * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&dy, ny * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&dw_t, nk * sizeof(float)));
  CUDA_CHECK(cudaMemcpy(dx, x, nx * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(dw_t, k_t, nk * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpyToSymbol(c_k, k, nk * sizeof(float)));
  free(k_t);

  const int imgs = Ho * Wo >= 256 ? 1 : 256 / (Ho * Wo);
  const bool fits_block = (Ho * Wo) <= 1024 && ((size_t)nk + (size_t)imgs * C * H * W) * sizeof(float) <= 200 * 1024;
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  CUDA_CHECK(cudaEventRecord(start));
  if (fits_block && K == 5 && M == 16)
    launch<16, 5>(dx, dw_t, dy, B, C, H, W);
  else if (fits_block && K == 5 && M == 32)
    launch<32, 5>(dx, dw_t, dy, B, C, H, W);
  else
    conv_generic_kernel<<<(unsigned)((ny + 255) / 256), 256>>>(dx, dy, B, M, C, H, W, K);
  CUDA_CHECK(cudaEventRecord(stop));
  CUDA_CHECK(cudaEventSynchronize(stop));
  CUDA_CHECK(cudaGetLastError());
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  CUDA_CHECK(cudaMemcpy(y, dy, ny * sizeof(float), cudaMemcpyDeviceToHost));
  cudaFree(dx);
  cudaFree(dy);
  cudaFree(dw_t);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / 1000.0;
}
