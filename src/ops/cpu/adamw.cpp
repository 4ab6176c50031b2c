// CPU AdamW (formulas in ops/adamw.h): one independent FP32 update per element, split statically across the OpenMP
// threads, so the result does not depend on the thread count. BF16 moments are decoded and re-encoded around the
// same FP32 arithmetic as FP32 moments.
#include <cmath>

#include "ops/adamw.h"
#include "ops/cpu/kernels.h"

namespace fp8train::ops::cpu {
namespace {

// Updates p in place and returns the new moments through m_out, v_out.
inline void update_element(const AdamWProblem& k, float& p, float g, float m, float v, float* m_out, float* v_out) {
  m = k.beta1 * m + k.one_minus_beta1 * g;
  v = k.beta2 * v + k.one_minus_beta2 * (g * g);
  *m_out = m;
  *v_out = v;
  const float denom = std::sqrt(v) * k.inv_sqrt_bias2 + k.eps;
  p = p * k.decay_factor - k.step_size * (m / denom);
}

}  // namespace

void adamw(const ExecCtx&, const AdamWProblem& k, float* param, const float* grad, void* exp_avg, void* exp_avg_sq) {
  const int64_t n = k.n;
  if (k.moment_dtype == DType::F32) {
    float* m = static_cast<float*>(exp_avg);
    float* v = static_cast<float*>(exp_avg_sq);
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) update_element(k, param[i], grad[i], m[i], v[i], &m[i], &v[i]);
  } else if (k.moment_dtype == DType::BF16) {
    bf16* m = static_cast<bf16*>(exp_avg);
    bf16* v = static_cast<bf16*>(exp_avg_sq);
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) {
      float m_new, v_new;
      update_element(k, param[i], grad[i], static_cast<float>(m[i]), static_cast<float>(v[i]), &m_new, &v_new);
      m[i] = bf16(m_new);
      v[i] = bf16(v_new);
    }
  } else {
    throw_unsupported_dtype(k.moment_dtype, "adamw");
  }
}

}  // namespace fp8train::ops::cpu
