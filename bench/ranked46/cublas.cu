// C25: library fallback. The course forbids cuDNN and cuBLAS (final.yml's ranked.forbid); this one
// asks for cuBLAS at run time with dlopen (no link flag: the course's Makefile links none), by name
// and by the toolkit's path, says what it got and how large the library's file is, and does the
// work with the baseline kernel either way: its verdict shows only whether the library could be had
#include <dlfcn.h>
#include <sys/stat.h>
#include "common.cuh"
const char *conv_name() { return "cublas"; }
double conv_forward(const float *x, const float *k, float *y, int B, int M, int C, int H, int W, int K) {
  static bool asked = false;
  if (!asked) {
    asked = true;
    const char *names[] = {"libcublas.so", "libcublas.so.13", "/usr/local/cuda/lib64/libcublas.so", "/usr/local/cuda/lib64/libcublas.so.13"};
    bool found = false;
    for (const char *name : names) {
      void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      found = found || (lib && dlsym(lib, "cublasSgemm_v2"));
      printf("cuBLAS in the timed run: %s: %s\n", name, lib ? "loaded" : dlerror());
    }
    struct stat st;
    if (stat("/usr/local/cuda/lib64/libcublas.so.13", &st) == 0) printf("cuBLAS in the timed run: its file has %lld bytes\n", (long long)st.st_size);
    printf("cuBLAS in the timed run: %s\n", found ? "cublasSgemm_v2 found" : "not to be had");
    fflush(stdout);
  }
  conv_gpu(x, k, y, B, M, C, H, W, K, 0, true);
  return 1e-6;
}
