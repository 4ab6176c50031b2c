// AdamW with decoupled weight decay (Loshchilov & Hutter) on the FP32 master weights of a parameter arena:
// the driver of ops::adamw_update (formulas and arithmetic in ops/adamw.h). It owns the two moment arenas —
// m (exp_avg) and v (exp_avg_sq), laid out like the parameters, in the configured moment dtype (FP32, or BF16 as in
// DeepSeek-V3's recipe: decoded, updated in FP32, re-encoded round to nearest even), booked under
// MemCategory::OptimizerState on the parameters' device — and the step count t. A step is two op calls: the range of
// parameters with weight decay, then the range without.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "optim/param.h"
#include "tensor/exec_ctx.h"

namespace fp8train::optim {

enum class MomentDtype : uint8_t { F32, BF16 };

// "fp32" / "bf16" <-> MomentDtype; parse throws Error naming the bad value.
MomentDtype parse_moment_dtype(const std::string& text);
const char* moment_dtype_name(MomentDtype dtype);
// The tensor dtype that stores moments of this kind.
DType moment_storage_dtype(MomentDtype dtype);

struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  MomentDtype moment_dtype = MomentDtype::BF16;
};

class AdamW {
 public:
  // Zeroed moments for the parameters' layout (the arenas are checked: ParamArenas::validate).
  AdamW(const AdamWConfig& config, const ParamArenas& params);
  // Moments for, and updates of, the elements `shard` of the arenas only (a range inside the arena).
  AdamW(const AdamWConfig& config, const ParamArenas& params, ArenaRange shard);
  // The same for several disjoint ranges in increasing order (ZeRO-1 with sharded experts: the experts' shard and
  // the replicated parameters' shard); their moments are stored back to back in that order.
  AdamW(const AdamWConfig& config, const ParamArenas& params, std::vector<ArenaRange> shards);

  // One update of every parameter with learning rate `lr`: advances the step count t by one, then updates the decay
  // range with config().weight_decay and the no-decay range without. `params` must be the arenas the optimizer was
  // built for (same layout, checked).
  void step(const ExecCtx& ctx, const ParamArenas& params, double lr);

  const AdamWConfig& config() const { return config_; }
  int64_t step_count() const { return step_count_; }
  // Restores the step count (from a checkpoint; its moments are copied into the views of exp_avg / exp_avg_sq).
  void set_step_count(int64_t step_count);

  // The moments, one view per parameter under the parameter's name (unsharded optimizers only).
  const Arena& exp_avg() const;
  const Arena& exp_avg_sq() const;
  // The elements this optimizer updates ([0, elements) unless sharded) and their moments, 1-D [shard().size()]
  // (shard(): the one range; a multi-range optimizer has shards(), its moments the ranges' back to back).
  bool sharded() const { return !m_.defined(); }
  const ArenaRange& shard() const;
  const std::vector<ArenaRange>& shards() const { return shards_; }
  const Tensor& exp_avg_shard() const { return m_shard_; }
  const Tensor& exp_avg_sq_shard() const { return v_shard_; }
  // Bytes of both moment arenas (what the optimizer state costs, padding included).
  int64_t state_bytes() const {
    return static_cast<int64_t>(sharded() ? m_shard_.nbytes() + v_shard_.nbytes() : m_.nbytes() + v_.nbytes());
  }

 private:
  AdamWConfig config_;
  Arena m_, v_;  // unsharded only
  std::vector<ArenaRange> shards_;
  Tensor m_shard_, v_shard_;
  int64_t step_count_ = 0;
};

}  // namespace fp8train::optim
