// Ranked runs (issue 46): what the harness does for every GPU build before an operation's clock
// starts and after it stops, so that the ranked time is the convolution's: CUDA's context is made
// first (~0.3 s, and noisy), and the inputs' and outputs' memory is page-locked while the clock
// runs (the copies are DMA at the bus's speed, not staged through the CPU, whose speed wanders:
// on the H100 a run went from 48.2 +- 3.2 ms to 28.0 +- 0.6 ms, bench/h100-ranked46-noise-*). Linked into the GPU builds
// only; driver.cc calls these when they are there. A failure leaves the memory pageable (slower,
// still correct) and is cleared, so that the student's own error checks never see it.
#include <cuda_runtime.h>

extern "C" void rai_gpu_warmup() { cudaFree(nullptr); }

extern "C" void rai_gpu_pin(void *p, size_t bytes) {
  if (cudaHostRegister(p, bytes, cudaHostRegisterDefault) != cudaSuccess) cudaGetLastError();
}

// the inputs' memory is mapped read-only (rai-timed writes it; the job cannot)
extern "C" void rai_gpu_pin_inputs(const void *p, size_t bytes) {
  if (p && cudaHostRegister(const_cast<void *>(p), bytes, cudaHostRegisterReadOnly) != cudaSuccess) cudaGetLastError();
}

extern "C" void rai_gpu_unpin(const void *p) {
  if (cudaHostUnregister(const_cast<void *>(p)) != cudaSuccess) cudaGetLastError();
}
