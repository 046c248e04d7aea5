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

// A short name for the log ("cpu", "gpu-baseline", ...).
const char *conv_name();
