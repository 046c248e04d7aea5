// Where a ranked run's offset comes from (issue 46): on the device's VM the passes of one run share
// an offset (sd 1.09 % between runs, 1.93 % within, bench/h200-ranked46-passes-2026-11-29.txt).
// One process here is one run: the course's two layers (ECE 408's shapes, batch 10,000) done
// ``passes`` times as the baseline new-forward.cu does them (cudaMalloc, copy in, the kernel, copy
// out, cudaFree), each phase timed, on host memory of one kind, page-locked once as rai_op.h's
// harness does. bench/run_offset.py starts many such processes, the kinds interleaved, and splits
// each phase's spread into the part shared by a run's passes and the part within a run.
//
//   nvcc -O2 -Ibench -Iexamples/ece408-conv -o /tmp/run_offset bench/run_offset.cu && /tmp/run_offset <kind>[:once] <passes>
//   kind: memfd (rai-timed's memfd, 4 KiB pages: as today) | thp (the memfd advised to huge pages)
//         | hugetlb (a memfd of 2 MiB pages from the reserved pool) | host (cudaMallocHost);
//   ":once": the GPU's memory is allocated once, before the first pass, and kept (no cudaMalloc or
//   cudaFree in the timed part), as a conv_setup hook run before rai_op_begin would do it
#include <cuda_runtime.h>
#include <fcntl.h>
#include <linux/memfd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now_ms() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

#include "ranked46/common.cuh"  // the baseline kernel (conv_forward_kernel) and CUDA_CHECK

static void *host_memory(const char *kind, size_t bytes) {
  if (!strcmp(kind, "host")) {
    void *p;
    CUDA_CHECK(cudaMallocHost(&p, bytes));
    return p;
  }
  unsigned flags = !strcmp(kind, "hugetlb") ? MFD_HUGETLB : 0;
  size_t len = (bytes + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
  int fd = (int)syscall(SYS_memfd_create, "probe", flags);
  if (fd < 0 || ftruncate(fd, (off_t)len) != 0) {
    perror(kind);
    exit(1);
  }
  void *p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    perror("mmap");
    exit(1);
  }
  if (!strcmp(kind, "thp") && madvise(p, len, MADV_HUGEPAGE) != 0) perror("madvise");
  memset(p, 0, len);  // every page in place, as rai-timed's MAP_POPULATE and the draw do
  CUDA_CHECK(cudaHostRegister(p, len, cudaHostRegisterDefault));
  return p;
}

struct Layer {
  int M, C, H, W, K;
};

int main(int argc, char **argv) {
  char kind[64];
  snprintf(kind, sizeof kind, "%s", argc > 1 ? argv[1] : "memfd");
  char *colon = strchr(kind, ':');
  const bool once = colon && !strcmp(colon, ":once");
  if (colon) *colon = 0;
  const int passes = argc > 2 ? atoi(argv[2]) : 5, B = 10000;
  const Layer layers[] = {{16, 1, 28, 28, 5}, {32, 16, 12, 12, 5}};
  CUDA_CHECK(cudaFree(nullptr));
  float *hin[2], *hout[2];
  size_t nx[2], nk[2], ny[2];
  for (int l = 0; l < 2; ++l) {
    const Layer &L = layers[l];
    nx[l] = (size_t)B * L.C * L.H * L.W;
    nk[l] = (size_t)L.M * L.C * L.K * L.K;
    ny[l] = (size_t)B * L.M * (L.H - L.K + 1) * (L.W - L.K + 1);
    hin[l] = (float *)host_memory(kind, (nx[l] + nk[l]) * 4);
    hout[l] = (float *)host_memory(kind, ny[l] * 4);
    for (size_t i = 0; i < nx[l] + nk[l]; ++i) hin[l][i] = (float)(i % 97) / 97.0f;
  }
  float *keep[2][3] = {};
  if (once)
    for (int l = 0; l < 2; ++l) {
      CUDA_CHECK(cudaMalloc(&keep[l][0], nx[l] * 4));
      CUDA_CHECK(cudaMalloc(&keep[l][1], nk[l] * 4));
      CUDA_CHECK(cudaMalloc(&keep[l][2], ny[l] * 4));
    }
  // per pass: alloc, h2d, kernel, d2h, free, total (both layers)
  for (int pass = 0; pass < passes; ++pass) {
    double ph[6] = {0};
    for (int l = 0; l < 2; ++l) {
      const Layer &L = layers[l];
      const int Ho = L.H - L.K + 1, Wo = L.W - L.K + 1, tw = (Wo + 15) / 16, th = (Ho + 15) / 16;
      double t0 = now_ms();
      float *dx = keep[l][0], *dk = keep[l][1], *dy = keep[l][2];
      if (!once) {
        CUDA_CHECK(cudaMalloc(&dx, nx[l] * 4));
        CUDA_CHECK(cudaMalloc(&dk, nk[l] * 4));
        CUDA_CHECK(cudaMalloc(&dy, ny[l] * 4));
      }
      double t1 = now_ms();
      CUDA_CHECK(cudaMemcpy(dx, hin[l], nx[l] * 4, cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaMemcpy(dk, hin[l] + nx[l], nk[l] * 4, cudaMemcpyHostToDevice));
      double t2 = now_ms();
      conv_forward_kernel<<<dim3(L.M, tw * th, B), dim3(TILE, TILE, 1)>>>(dx, dk, dy, B, L.M, L.C, L.H, L.W, L.K, tw);
      CUDA_CHECK(cudaDeviceSynchronize());
      double t3 = now_ms();
      CUDA_CHECK(cudaMemcpy(hout[l], dy, ny[l] * 4, cudaMemcpyDeviceToHost));
      double t4 = now_ms();
      if (!once) {
        cudaFree(dx);
        cudaFree(dk);
        cudaFree(dy);
      }
      double t5 = now_ms();
      double d[] = {t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t5 - t0};
      for (int i = 0; i < 6; ++i) ph[i] += d[i];
    }
    printf("%s%s %d %.4f %.4f %.4f %.4f %.4f %.4f\n", kind, once ? ":once" : "", pass, ph[0], ph[1], ph[2], ph[3], ph[4], ph[5]);
  }
  return 0;
}
