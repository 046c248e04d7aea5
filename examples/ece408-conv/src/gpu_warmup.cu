// Ranked runs (issue 46): what the harness does for every GPU build before an operation's clock
// starts and after it stops, so that the ranked time is the convolution's: CUDA's context is made
// first (~0.3 s, and noisy), and the outputs' memory is page-locked while the clock runs (the copy
// back is DMA at the bus's speed, not a staged copy whose speed wanders). Linked into the GPU
// builds only; driver.cc calls these when they are there.
#include <cuda_runtime.h>

extern "C" void rai_gpu_warmup() { cudaFree(nullptr); }

extern "C" void rai_gpu_pin(void *p, size_t bytes) { cudaHostRegister(p, bytes, cudaHostRegisterDefault); }

extern "C" void rai_gpu_unpin(void *p) { cudaHostUnregister(p); }
