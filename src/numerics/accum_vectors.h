// Reader for the captured Hopper FP8 GEMM vectors (tests/data/hopper-fp8-accum/README.md has the layout):
// one GEMM D[M,N] = A[M,K]·B[N,K]ᵀ with FP8 A and B (K-major), a mode, and the FP32 D the H200 produced.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "numerics/formats.h"

namespace fp8train::num {

struct AccumVector {
  uint32_t m = 0, n = 0, k = 0;
  Fp8Format format_a = Fp8Format::E4M3, format_b = Fp8Format::E4M3;
  bool promote = false;        // mode 1 ("default"): promotion every 128; mode 0 ("fast"): never
  std::vector<uint8_t> a, b;   // a: [m, k], b: [n, k]
  std::vector<float> d;        // [m, n]
};

// Throws fp8train::Error naming the file and the problem (missing, truncated, bad magic, bad field).
AccumVector read_accum_vector(const std::string& path);

struct AccumCheck {
  uint64_t matched = 0, total = 0;
};
// Recomputes D with the Hopper model (hopper_dot) and counts bit-identical outputs.
AccumCheck check_accum_vector(const AccumVector& v);

}  // namespace fp8train::num
