// m1: the CPU reference convolution. Slow and obviously right.
#include <chrono>
#include <cmath>

#include "conv.h"

const char *conv_name() { return "cpu"; }

double conv_forward(const float *x, const float *k, float *y, int B, int M, int C, int H, int W, int K) {
  const int Ho = H - K + 1, Wo = W - K + 1;
  auto start = std::chrono::steady_clock::now();
  for (int b = 0; b < B; ++b)
    for (int m = 0; m < M; ++m)
      for (int h = 0; h < Ho; ++h)
        for (int w = 0; w < Wo; ++w) {
          float acc = 0.0f;
          for (int c = 0; c < C; ++c)
            for (int p = 0; p < K; ++p)
              for (int q = 0; q < K; ++q)
                acc = std::fma(x[((b * C + c) * H + h + p) * W + w + q], k[((m * C + c) * K + p) * K + q], acc);
          y[((b * M + m) * Ho + h) * Wo + w] = acc;
        }
  std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  return took.count();
}
