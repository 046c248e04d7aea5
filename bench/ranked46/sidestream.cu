// C01/C05: the kernel and the copy back on a non-blocking stream into page-locked outputs, returned
// without waiting: the copy lands after the end mark, while the job is frozen
#include "common.cuh"
const char *conv_name() { return "sidestream"; }
double conv_forward(const float *x, const float *k, float *y, int B, int M, int C, int H, int W, int K) {
  static cudaStream_t s;
  if (!s) CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const size_t ny = (size_t)B * M * (H - K + 1) * (W - K + 1);
  cudaHostRegister(y, ny * sizeof(float), cudaHostRegisterDefault);  // (the harness may have already)
  cudaGetLastError();
  conv_gpu(x, k, y, B, M, C, H, W, K, s, false);
  return 1e-6;
}
