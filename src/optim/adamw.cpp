// AdamW driver (see adamw.h): checks, the step count, and one ops::adamw_update per weight-decay range.
#include "optim/adamw.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "ops/adamw.h"

namespace fp8train::optim {

MomentDtype parse_moment_dtype(const std::string& text) {
  if (text == "fp32" || text == "f32") return MomentDtype::F32;
  if (text == "bf16") return MomentDtype::BF16;
  FP8T_FAIL("unknown optimizer moment dtype '{}' (expected fp32 or bf16)", text);
}

const char* moment_dtype_name(MomentDtype dtype) { return dtype == MomentDtype::F32 ? "fp32" : "bf16"; }

DType moment_storage_dtype(MomentDtype dtype) { return dtype == MomentDtype::F32 ? DType::F32 : DType::BF16; }

namespace {
void check_config(const AdamWConfig& c) {
  FP8T_CHECK(c.beta1 >= 0.0 && c.beta1 < 1.0, "AdamW beta1 must be in [0, 1), got {}", c.beta1);
  FP8T_CHECK(c.beta2 >= 0.0 && c.beta2 < 1.0, "AdamW beta2 must be in [0, 1), got {}", c.beta2);
  FP8T_CHECK(c.eps > 0.0 && std::isfinite(c.eps), "AdamW eps must be positive and finite, got {}", c.eps);
  FP8T_CHECK(c.weight_decay >= 0.0 && std::isfinite(c.weight_decay),
             "AdamW weight decay must be non-negative and finite, got {}", c.weight_decay);
}
}  // namespace

AdamW::AdamW(const AdamWConfig& config, const ParamArenas& params) : config_(config) {
  check_config(config_);
  params.validate();
  const DType dt = moment_storage_dtype(config_.moment_dtype);
  m_ = Arena(params.values.layout_ptr(), dt, MemCategory::OptimizerState, params.values.device());
  v_ = Arena(params.values.layout_ptr(), dt, MemCategory::OptimizerState, params.values.device());
  shards_ = {{0, params.layout().elements()}};
  m_shard_ = m_.flat();
  v_shard_ = v_.flat();
}

AdamW::AdamW(const AdamWConfig& config, const ParamArenas& params, ArenaRange shard)
    : AdamW(config, params, std::vector<ArenaRange>{shard}) {}

AdamW::AdamW(const AdamWConfig& config, const ParamArenas& params, std::vector<ArenaRange> shards)
    : config_(config), shards_(std::move(shards)) {
  check_config(config_);
  params.validate();
  FP8T_CHECK(!shards_.empty(), "AdamW: a sharded optimizer needs at least one range");
  int64_t total = 0, last_end = 0;
  for (const ArenaRange& s : shards_) {
    FP8T_CHECK(s.begin >= last_end && s.begin <= s.end && s.end <= params.layout().elements(),
               "AdamW: shard [{}, {}) is not a range of the {}-element parameter arena after the ranges before it",
               s.begin, s.end, params.layout().elements());
    last_end = s.end;
    total += s.size();
  }
  const DType dt = moment_storage_dtype(config_.moment_dtype);
  m_shard_ = Tensor::zeros({total}, dt, MemCategory::OptimizerState, params.values.device());
  v_shard_ = Tensor::zeros({total}, dt, MemCategory::OptimizerState, params.values.device());
}

const ArenaRange& AdamW::shard() const {
  FP8T_CHECK(shards_.size() == 1, "AdamW: this optimizer covers {} ranges (use shards())", shards_.size());
  return shards_.front();
}

const Arena& AdamW::exp_avg() const {
  FP8T_CHECK(!sharded(), "AdamW: a sharded optimizer has no whole moment arena (use exp_avg_shard)");
  return m_;
}

const Arena& AdamW::exp_avg_sq() const {
  FP8T_CHECK(!sharded(), "AdamW: a sharded optimizer has no whole moment arena (use exp_avg_sq_shard)");
  return v_;
}

void AdamW::step(const ExecCtx& ctx, const ParamArenas& params, double lr) {
  FP8T_CHECK(params.grads.layout_ptr() == params.values.layout_ptr() &&
                 (sharded() ? shards_.back().end <= params.layout().elements()
                            : params.values.layout_ptr() == m_.layout_ptr()),
             "AdamW: these parameter arenas are not the ones the optimizer was built for");
  FP8T_CHECK(std::isfinite(lr) && lr >= 0.0, "AdamW: learning rate must be finite and non-negative, got {}", lr);
  ++step_count_;
  ops::AdamWHyper h{.lr = lr,
                    .beta1 = config_.beta1,
                    .beta2 = config_.beta2,
                    .eps = config_.eps,
                    .weight_decay = config_.weight_decay,
                    .step = step_count_};
  // Per range of the shards: its weight-decay part, then the rest (one op call each).
  int64_t base = 0;  // where the range's moments start
  for (const ArenaRange& shard : shards_) {
    const auto update = [&](const ArenaRange& range, double weight_decay) {
      const ArenaRange r{std::max(range.begin, shard.begin), std::min(range.end, shard.end)};
      if (r.empty()) return;
      const int64_t at = base + r.begin - shard.begin;
      h.weight_decay = weight_decay;
      ops::adamw_update(ctx, params.values.range(r), params.grads.range(r), m_shard_.narrow(0, at, r.size()),
                        v_shard_.narrow(0, at, r.size()), h);
    };
    update(params.decay, config_.weight_decay);
    update(params.no_decay, 0.0);
    base += shard.size();
  }
}

void AdamW::set_step_count(int64_t step_count) {
  FP8T_CHECK(step_count >= 0, "optimizer step count must be non-negative, got {}", step_count);
  step_count_ = step_count;
}

}  // namespace fp8train::optim
