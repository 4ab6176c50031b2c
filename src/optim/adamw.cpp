// AdamW update loop (see adamw.h). Every element is independent, so the result does not depend on the
// thread count; the FP32 arithmetic is written out so that FP32 and BF16 moments share one code path.
#include "optim/adamw.h"

#include <cmath>
#include <unordered_set>

#include "common/error.h"
#include "numerics/formats.h"

namespace fp8train::optim {

MomentDtype parse_moment_dtype(const std::string& text) {
  if (text == "fp32" || text == "f32") return MomentDtype::F32;
  if (text == "bf16") return MomentDtype::BF16;
  FP8T_FAIL("unknown optimizer moment dtype '{}' (expected fp32 or bf16)", text);
}

const char* moment_dtype_name(MomentDtype dtype) { return dtype == MomentDtype::F32 ? "fp32" : "bf16"; }

namespace {

void check_config(const AdamWConfig& c) {
  FP8T_CHECK(c.beta1 >= 0.0 && c.beta1 < 1.0, "AdamW beta1 must be in [0, 1), got {}", c.beta1);
  FP8T_CHECK(c.beta2 >= 0.0 && c.beta2 < 1.0, "AdamW beta2 must be in [0, 1), got {}", c.beta2);
  FP8T_CHECK(c.eps > 0.0 && std::isfinite(c.eps), "AdamW eps must be positive and finite, got {}", c.eps);
  FP8T_CHECK(c.weight_decay >= 0.0 && std::isfinite(c.weight_decay),
             "AdamW weight decay must be non-negative and finite, got {}", c.weight_decay);
}

// The per-element update on FP32 registers; m and v are read and written by the caller.
struct Coefficients {
  float beta1, one_minus_beta1, beta2, one_minus_beta2;
  float step_size;        // lr / (1 − β1^t)
  float inv_sqrt_bias2;   // 1 / sqrt(1 − β2^t)
  float eps;
  float decay_factor;     // 1 − lr·wd (1 for parameters without decay)
};

inline float update_element(const Coefficients& k, float& p, float g, float m, float v, float* m_out, float* v_out) {
  m = k.beta1 * m + k.one_minus_beta1 * g;
  v = k.beta2 * v + k.one_minus_beta2 * (g * g);
  *m_out = m;
  *v_out = v;
  const float denom = std::sqrt(v) * k.inv_sqrt_bias2 + k.eps;
  p = p * k.decay_factor - k.step_size * (m / denom);
  return p;
}

}  // namespace

AdamW::AdamW(const AdamWConfig& config, const ParamList& params) : config_(config) {
  check_config(config_);
  std::unordered_set<std::string> names;
  state_.reserve(params.size());
  for (const ParamBuffer& p : params) {
    FP8T_CHECK(names.insert(p.name).second, "AdamW: parameter name '{}' appears twice", p.name);
    MomentState s;
    s.name = p.name;
    s.size = p.size;
    if (config_.moment_dtype == MomentDtype::F32) {
      s.m_f32.assign(p.size, 0.0f);
      s.v_f32.assign(p.size, 0.0f);
    } else {
      s.m_bf16.assign(p.size, 0);
      s.v_bf16.assign(p.size, 0);
    }
    state_.push_back(std::move(s));
  }
}

void AdamW::step(const ParamList& params, double lr) {
  FP8T_CHECK(params.size() == state_.size(), "AdamW: {} parameters given, the optimizer was built for {}",
             params.size(), state_.size());
  FP8T_CHECK(std::isfinite(lr) && lr >= 0.0, "AdamW: learning rate must be finite and non-negative, got {}", lr);
  ++step_count_;
  const double t = static_cast<double>(step_count_);
  const double bias1 = 1.0 - std::pow(config_.beta1, t);
  const double bias2 = 1.0 - std::pow(config_.beta2, t);
  for (size_t pi = 0; pi < params.size(); ++pi) {
    const ParamBuffer& p = params[pi];
    MomentState& s = state_[pi];
    FP8T_CHECK(p.name == s.name && p.size == s.size,
               "AdamW: parameter {} is '{}' with {} elements, the optimizer holds '{}' with {}", pi, p.name,
               p.size, s.name, s.size);
    Coefficients k;
    k.beta1 = static_cast<float>(config_.beta1);
    k.one_minus_beta1 = static_cast<float>(1.0 - config_.beta1);
    k.beta2 = static_cast<float>(config_.beta2);
    k.one_minus_beta2 = static_cast<float>(1.0 - config_.beta2);
    k.step_size = static_cast<float>(lr / bias1);
    k.inv_sqrt_bias2 = static_cast<float>(1.0 / std::sqrt(bias2));
    k.eps = static_cast<float>(config_.eps);
    k.decay_factor = p.weight_decay ? static_cast<float>(1.0 - lr * config_.weight_decay) : 1.0f;
    const long n = static_cast<long>(p.size);
    if (config_.moment_dtype == MomentDtype::F32) {
      float* m = s.m_f32.data();
      float* v = s.v_f32.data();
#pragma omp parallel for schedule(static) if (n > 65536)
      for (long i = 0; i < n; ++i) update_element(k, p.value[i], p.grad[i], m[i], v[i], &m[i], &v[i]);
    } else {
      uint16_t* m = s.m_bf16.data();
      uint16_t* v = s.v_bf16.data();
#pragma omp parallel for schedule(static) if (n > 65536)
      for (long i = 0; i < n; ++i) {
        float m_new, v_new;
        update_element(k, p.value[i], p.grad[i], num::bf16_decode(m[i]), num::bf16_decode(v[i]), &m_new, &v_new);
        m[i] = num::bf16_encode(m_new);
        v[i] = num::bf16_encode(v_new);
      }
    }
  }
}

void AdamW::load_state(std::vector<MomentState> state, int64_t step_count) {
  FP8T_CHECK(state.size() == state_.size(), "optimizer state holds {} parameters, the model has {}",
             state.size(), state_.size());
  FP8T_CHECK(step_count >= 0, "optimizer step count must be non-negative, got {}", step_count);
  for (size_t i = 0; i < state.size(); ++i) {
    const MomentState& have = state_[i];
    const MomentState& got = state[i];
    FP8T_CHECK(got.name == have.name && got.size == have.size,
               "optimizer state entry {} is '{}' with {} elements, the model expects '{}' with {}", i, got.name,
               got.size, have.name, have.size);
    const bool f32 = config_.moment_dtype == MomentDtype::F32;
    const size_t m_size = f32 ? got.m_f32.size() : got.m_bf16.size();
    const size_t v_size = f32 ? got.v_f32.size() : got.v_bf16.size();
    FP8T_CHECK(m_size == got.size && v_size == got.size,
               "optimizer state for '{}' is not stored as {} moments of {} elements", got.name,
               moment_dtype_name(config_.moment_dtype), got.size);
  }
  state_ = std::move(state);
  step_count_ = step_count;
}

float AdamW::first_moment(size_t param_index, size_t i) const {
  const MomentState& s = state_.at(param_index);
  return config_.moment_dtype == MomentDtype::F32 ? s.m_f32.at(i) : num::bf16_decode(s.m_bf16.at(i));
}

float AdamW::second_moment(size_t param_index, size_t i) const {
  const MomentState& s = state_.at(param_index);
  return config_.moment_dtype == MomentDtype::F32 ? s.v_f32.at(i) : num::bf16_decode(s.v_bf16.at(i));
}

}  // namespace fp8train::optim
