// AdamW with decoupled weight decay (Loshchilov & Hutter), on FP32 master weights.
//   m ← β1·m + (1−β1)·g            v ← β2·v + (1−β2)·g²
//   m̂ = m / (1−β1^t)               v̂ = v / (1−β2^t)
//   p ← p − lr·wd·p − lr · m̂ / (√v̂ + ε)
// The moments m, v are stored in FP32 or in BF16 (DeepSeek-V3's recipe): a BF16 moment is decoded to
// FP32, updated in FP32 and re-encoded with round-to-nearest-even (num::bf16_encode), so only the storage
// is narrow. State per parameter: m, v with the parameter's element count, keyed by parameter name.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "optim/param.h"

namespace fp8train::optim {

enum class MomentDtype : uint8_t { F32, BF16 };

// "fp32" / "bf16" <-> MomentDtype; parse throws Error naming the bad value.
MomentDtype parse_moment_dtype(const std::string& text);
const char* moment_dtype_name(MomentDtype dtype);

struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  MomentDtype moment_dtype = MomentDtype::BF16;
};

// One parameter's moments. Exactly one pair of vectors is in use, according to the dtype: the BF16 pair
// holds the raw 16-bit codes (what a checkpoint stores), the F32 pair holds floats.
struct MomentState {
  std::string name;
  size_t size = 0;
  std::vector<float> m_f32, v_f32;
  std::vector<uint16_t> m_bf16, v_bf16;
};

class AdamW {
 public:
  // Creates zeroed moments for each parameter (names must be unique).
  AdamW(const AdamWConfig& config, const ParamList& params);

  // One update of every parameter with learning rate `lr`. `params` must list the same names and sizes,
  // in the same order, as at construction (checked). Advances the step count t by one first.
  void step(const ParamList& params, double lr);

  const AdamWConfig& config() const { return config_; }
  int64_t step_count() const { return step_count_; }
  const std::vector<MomentState>& state() const { return state_; }

  // Restores the moments and step count (from a checkpoint): names, sizes and dtype must match (checked).
  void load_state(std::vector<MomentState> state, int64_t step_count);

  // Reads moment i of parameter p as FP32 (whatever the storage dtype): for tests and diagnostics.
  float first_moment(size_t param_index, size_t i) const;
  float second_moment(size_t param_index, size_t i) const;

 private:
  AdamWConfig config_;
  std::vector<MomentState> state_;
  int64_t step_count_ = 0;
};

}  // namespace fp8train::optim
