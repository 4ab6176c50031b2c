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
// Piecewise constant: a scalar that holds a value per phase of the run, each phase starting at a fraction of
// the run's steps — DeepSeek-V3's MTP loss weight λ (0.3 for the first 10T of 14.8T tokens, then 0.1) and its
// router-bias update speed γ (0.001 for the first 14.3T tokens, then 0). A piece starting at fraction f begins at
// step round(f·total_steps) (rounded as the LR decay points are); when two pieces round to the same step, the
// later one wins.
//   text form: comma-separated pieces "VALUE" (the first) or "VALUE@START" (START in [0, 1), increasing),
//   e.g. "0.3,0.1@0.676" for DeepSeek-V3's λ and "0.001,0@0.966" for its γ.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

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

struct PiecewiseSchedule {
  struct Piece {
    double value = 0.0;
    double start = 0.0;  // fraction of the run's steps where the piece begins, in [0, 1)
  };
  std::vector<Piece> pieces;  // the first starts at 0; starts strictly increase
  int64_t total_steps = 1;

  static PiecewiseSchedule constant(double value, int64_t total_steps);
  void validate() const;  // throws Error naming the inconsistent piece
  double at(int64_t step) const;
};

// Parses the text form (above), each value in [min_value, max_value]; throws Error naming the bad piece, e.g.
// "piece '0.1@1.5': the start must be in [0, 1)" (a caller adds which setting it was).
PiecewiseSchedule parse_piecewise_schedule(const std::string& text, int64_t total_steps, double min_value,
                                           double max_value);

}  // namespace fp8train::optim
