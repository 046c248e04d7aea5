// C25: library fallback. The course forbids cuDNN and cuBLAS (final.yml's ranked.forbid); this one
// asks for cuBLAS at run time with dlopen (no link flag: the course's Makefile links none), says
// whether it got it, and does the work with the baseline kernel either way, so its verdict shows
// only whether the library could be had in a timed run
#include <dlfcn.h>
#include "common.cuh"
const char *conv_name() { return "cublas"; }
double conv_forward(const float *x, const float *k, float *y, int B, int M, int C, int H, int W, int K) {
  static bool asked = false;
  if (!asked) {
    asked = true;
    const char *names[] = {"libcublas.so", "libcublas.so.13", "libcublas.so.12"};
    void *lib = nullptr;
    for (const char *name : names)
      if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
    void *sgemm = lib ? dlsym(lib, "cublasSgemm_v2") : nullptr;
    printf("cuBLAS in the timed run: %s\n", sgemm ? "loaded, cublasSgemm_v2 found" : dlerror());
    fflush(stdout);
  }
  conv_gpu(x, k, y, B, M, C, H, W, K, 0, true);
  return 1e-6;
}
