// What one pass of a ranked run costs outside its clock (issue 46, ranked.passes): the harness's
// memory for one operation (a memfd of rai-timed's, mapped, every page in place, page-locked for
// the GPU, then unlocked and unmapped), phase by phase, as rai_op.h and gpu_warmup.cu do it, and
// with the pages put in place by rai-timed's threads (fallocate) before the job maps them.
//
//   nvcc -O2 -o /tmp/pass_cost bench/pass_cost.cu -lpthread && /tmp/pass_cost
#include <cuda_runtime.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

struct Part {
  int fd;
  size_t off, len;
};

static void *fill(void *arg) {
  Part *p = (Part *)arg;
  fallocate(p->fd, 0, (off_t)p->off, (off_t)p->len);
  return nullptr;
}

// one operation's memory of ``bytes``; threads > 0: the pages allocated by that many threads first
static void one(size_t bytes, int threads, bool pin, double *ms) {
  double t0 = now();
  int fd = (int)syscall(SYS_memfd_create, "probe", 0);
  if (ftruncate(fd, (off_t)bytes) != 0) perror("ftruncate");
  if (threads > 0) {
    pthread_t th[64];
    Part parts[64];
    size_t step = (bytes / threads + 4095) & ~(size_t)4095;
    int n = 0;
    for (size_t off = 0; off < bytes && n < threads; off += step, ++n) {
      parts[n] = {fd, off, off + step > bytes ? bytes - off : step};
      pthread_create(&th[n], nullptr, fill, &parts[n]);
    }
    for (int i = 0; i < n; ++i) pthread_join(th[i], nullptr);
  }
  double t1 = now();
  void *p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  double t2 = now();
  if (threads == 0) memset(p, 0, bytes);
  double t3 = now();
  if (pin && cudaHostRegister(p, bytes, cudaHostRegisterDefault) != cudaSuccess) printf("register failed\n");
  double t4 = now();
  if (pin) cudaHostUnregister(p);
  double t5 = now();
  munmap(p, bytes);
  close(fd);
  double t6 = now();
  double d[] = {t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5, t6 - t0};
  for (int i = 0; i < 7; ++i) ms[i] += d[i];
}

int main() {
  double c0 = now();
  cudaFree(nullptr);
  printf("CUDA's context: %.1f ms\n", now() - c0);
  const size_t sizes[] = {(size_t)92160000 * 4, (size_t)23040000 * 4 + 1600 * 4 * 25 * 16};
  const char *names[] = {"layer 1's outputs (369 MB)", "layer 2's inputs (92 MB)"};
  for (int s = 0; s < 2; ++s)
    for (int threads : {0, 4, 16})
      for (int pin : {1, 0}) {
        double ms[7] = {0};
        const int reps = 5;
        for (int r = 0; r < reps; ++r) one(sizes[s], threads, pin, ms);
        printf("%-28s %s, %s: alloc %.1f  map %.1f  touch %.1f  register %.1f  unregister %.1f  unmap %.1f  = %.1f ms\n",
               names[s], threads ? (threads == 4 ? "fallocate x4 " : "fallocate x16") : "memset       ",
               pin ? "page-locked" : "pageable   ", ms[0] / reps, ms[1] / reps, ms[2] / reps, ms[3] / reps, ms[4] / reps,
               ms[5] / reps, ms[6] / reps);
      }
  return 0;
}
