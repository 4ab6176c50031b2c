// LR and batch-size schedules (formulas in schedule.h).
#include "optim/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "common/error.h"

namespace fp8train::optim {

void LrSchedule::validate() const {
  FP8T_CHECK(std::isfinite(peak_lr) && peak_lr > 0.0, "lr must be positive and finite, got {}", peak_lr);
  FP8T_CHECK(std::isfinite(final_lr) && final_lr >= 0.0 && final_lr <= peak_lr,
             "final lr must be in [0, lr = {}], got {}", peak_lr, final_lr);
  FP8T_CHECK(warmup_steps >= 0, "lr warmup steps must be non-negative, got {}", warmup_steps);
  FP8T_CHECK(decay_start >= warmup_steps, "lr decay start ({}) must not come before the end of warmup ({})",
             decay_start, warmup_steps);
  FP8T_CHECK(decay_end >= decay_start, "lr decay end ({}) must not come before the decay start ({})", decay_end,
             decay_start);
}

double LrSchedule::at(int64_t step) const {
  if (step < warmup_steps) return peak_lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  if (step < decay_start) return peak_lr;
  if (step < decay_end) {
    const double progress =
        static_cast<double>(step - decay_start) / static_cast<double>(decay_end - decay_start);
    return final_lr + (peak_lr - final_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  }
  return final_lr;
}

void BatchSizeSchedule::validate() const {
  FP8T_CHECK(target >= 1, "batch size must be at least 1, got {}", target);
  FP8T_CHECK(start >= 0 && start <= target, "batch size warmup start must be in [0, batch size = {}], got {}",
             target, start);
  FP8T_CHECK(warmup_steps >= 0, "batch size warmup steps must be non-negative, got {}", warmup_steps);
}

int64_t BatchSizeSchedule::at(int64_t step) const {
  if (start == 0 || start == target || warmup_steps == 0 || step >= warmup_steps) return target;
  const double frac = static_cast<double>(step) / static_cast<double>(warmup_steps);
  const double size = static_cast<double>(start) + (static_cast<double>(target - start)) * frac;
  return std::clamp<int64_t>(static_cast<int64_t>(std::llround(size)), 1, target);
}

}  // namespace fp8train::optim
