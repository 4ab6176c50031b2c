// Learning-rate and batch-size schedules, as functions of the optimizer step (0-based: the step being taken).
//
// LR (DeepSeek-V3's shape, report §4.2): linear warmup 0 → peak over `warmup_steps`; constant peak until
// `decay_start`; cosine decay peak → final over [decay_start, decay_end); constant final from decay_end on.
//   lr(s) = peak·(s+1)/warmup                                   s < warmup
//         = peak                                                warmup ≤ s < decay_start
//         = final + (peak−final)·½(1+cos(π·(s−decay_start)/(decay_end−decay_start)))   decay_start ≤ s < decay_end
//         = final                                               s ≥ decay_end
// Batch size: linear ramp from `start` sequences to `target` over `warmup_steps` steps (rounded to the
// nearest integer, never below 1), then `target` — DeepSeek-V3 ramps 3072 → 15360 sequences this way.
#pragma once
#include <cstdint>

namespace fp8train::optim {

struct LrSchedule {
  double peak_lr = 1e-3;
  double final_lr = 1e-4;
  int64_t warmup_steps = 0;
  int64_t decay_start = 0;  // step where the cosine decay begins (>= warmup_steps)
  int64_t decay_end = 0;    // step where it reaches final_lr (>= decay_start)

  void validate() const;  // throws Error naming the inconsistent field
  double at(int64_t step) const;
};

struct BatchSizeSchedule {
  int64_t start = 0;         // sequences at step 0 (0 or == target: no warmup)
  int64_t target = 1;        // sequences per step after warmup
  int64_t warmup_steps = 0;

  void validate() const;
  int64_t at(int64_t step) const;
};

}  // namespace fp8train::optim
