// A stand-in for OpenBLAS's cblas_dgemm in the standalone GPU test binary (scripts/gpu/h8_build.sh): the
// FP8 GEMM tests use the reference GEMM in `hopper` mode only, which never calls BLAS; linking the real
// OpenBLAS statically would add ~25 MB to what must travel to the device machine. Reaching this is a bug
// in the test binary's assumptions, reported loudly.
#include <cblas.h>

#include <cstdio>
#include <cstdlib>

extern "C" void cblas_dgemm(OPENBLAS_CONST enum CBLAS_ORDER, OPENBLAS_CONST enum CBLAS_TRANSPOSE,
                            OPENBLAS_CONST enum CBLAS_TRANSPOSE, OPENBLAS_CONST blasint, OPENBLAS_CONST blasint,
                            OPENBLAS_CONST blasint, OPENBLAS_CONST double, OPENBLAS_CONST double*,
                            OPENBLAS_CONST blasint, OPENBLAS_CONST double*, OPENBLAS_CONST blasint,
                            OPENBLAS_CONST double, double*, OPENBLAS_CONST blasint) {
  std::fprintf(stderr, "h8 standalone binary: cblas_dgemm is not linked (exact-mode reference GEMM unavailable)\n");
  std::abort();
}
