// CPU rotary position embedding on interleaved pairs: for pair i of a head at position pos,
//   (x0, x1) ← (x0·cos − x1·sin, x0·sin + x1·cos),  angle = pos·theta^(−2i/rope_dim);
// the inverse (backward) uses −angle. Angles are computed in double once per call ([seq_len, rope_dim/2]) and
// rounded to the compute type; bf16 elements are widened, rotated in FP32 and rounded back.
#include <cmath>
#include <vector>

#include "ops/cpu/kernels.h"
#include "ops/rope.h"

namespace fp8train::ops::cpu {
namespace {

template <class S, class T = compute_t<S>>
void rope_impl(const RopeProblem& p, S* x) {
  const int64_t half = p.rope_dim / 2;
  std::vector<T> cos_table(static_cast<size_t>(p.seq_len * half)), sin_table(cos_table.size());
  for (int64_t pos = 0; pos < p.seq_len; ++pos)
    for (int64_t i = 0; i < half; ++i) {
      const double inv_freq = std::pow(p.theta, -2.0 * static_cast<double>(i) / static_cast<double>(p.rope_dim));
      const double angle = static_cast<double>(p.pos_offset + pos) * inv_freq;
      cos_table[pos * half + i] = static_cast<T>(std::cos(angle));
      sin_table[pos * half + i] = static_cast<T>(p.inverse ? -std::sin(angle) : std::sin(angle));
    }
#pragma omp parallel for schedule(static) if (p.rows * p.heads * p.rope_dim > 16384)
  for (int64_t r = 0; r < p.rows; ++r) {
    const int64_t pos = r % p.seq_len;
    const T* cs = cos_table.data() + pos * half;
    const T* sn = sin_table.data() + pos * half;
    for (int64_t h = 0; h < p.heads; ++h) {
      S* v = x + r * p.ld + h * p.head_stride;
      for (int64_t i = 0; i < half; ++i) {
        const T x0 = load(v[2 * i]), x1 = load(v[2 * i + 1]);
        v[2 * i] = store<S>(x0 * cs[i] - x1 * sn[i]);
        v[2 * i + 1] = store<S>(x0 * sn[i] + x1 * cs[i]);
      }
    }
  }
}

}  // namespace

void rope(const ExecCtx&, const RopeProblem& p, void* x) {
  dispatch_storage(p.dtype, "rope", [&](auto tag) {
    using S = decltype(tag);
    rope_impl<S>(p, static_cast<S*>(x));
  });
}

}  // namespace fp8train::ops::cpu
