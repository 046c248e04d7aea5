// C09: the real work between cudaProfilerStop() and cudaProfilerStart() (ranked 5.7 us under ncu before
// issue 46): the clock is rai-timed's, so it ranks with the time the work took
#include <cuda_profiler_api.h>
#include "common.cuh"
const char *conv_name() { return "profstop"; }
double conv_forward(const float *x, const float *k, float *y, int B, int M, int C, int H, int W, int K) {
  cudaProfilerStop();
  conv_gpu(x, k, y, B, M, C, H, W, K, 0, true);
  cudaProfilerStart();
  return 1e-6;
}
