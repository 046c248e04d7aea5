// The one operation students write: the forward pass of a convolution layer.
//
//   y[b][m][h][w] = sum over c, p, q of x[b][c][h + p][w + q] * k[m][c][p][q]
//
// x is B x C x H x W, k is M x C x K x K, y is B x M x (H - K + 1) x (W - K + 1); all row-major,
// all on the host. Sum in the order c, then p, then q, with fused multiply-adds (fmaf), and the
// result matches the CPU reference bit for bit.
//
// conv_forward returns the time spent computing the convolution itself, in seconds (for a GPU:
// the kernels only, measured with CUDA events; memory copies are not counted).
#pragma once

double conv_forward(const float *x, const float *k, float *y, int B, int M, int C, int H, int W, int K);

// Optional: called before each conv_forward with the same shapes, before a ranked run's clock
// starts, when the inputs are not known yet. Make what does not depend on them here (the GPU's
// memory) and keep it: a ranked run times everything conv_forward does, and cudaMalloc and
// cudaFree of a layer's memory cost ~1.5 ms and vary by ~20 % from one process to the next
// (bench/h200-run-offset-2026-11-29.txt), which a ranked time would carry. A kernel may run here
// too (a warm-up, so that its first launch's loading is not in the clock); whatever is still
// running once the clock starts is timed with the rest.
void conv_prepare(int B, int M, int C, int H, int W, int K) __attribute__((weak));

// A short name for the log ("cpu", "gpu-baseline", ...).
const char *conv_name();
