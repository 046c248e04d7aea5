// C04/C16: no work at all; the outputs stay as they were (zero)
#include "src/conv.h"
const char *conv_name() { return "skip"; }
double conv_forward(const float *, const float *, float *, int, int, int, int, int, int) { return 1e-6; }
