// LR, batch-size and piecewise-constant schedules (formulas in schedule.h).
#include "optim/schedule.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
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

PiecewiseSchedule PiecewiseSchedule::constant(double value, int64_t total_steps) {
  return PiecewiseSchedule{{{value, 0.0}}, total_steps};
}

void PiecewiseSchedule::validate() const {
  FP8T_CHECK(!pieces.empty(), "a piecewise schedule needs at least one piece");
  FP8T_CHECK(total_steps >= 1, "a piecewise schedule needs at least one step, got {}", total_steps);
  FP8T_CHECK(pieces.front().start == 0.0, "the first piece must start at 0, got {}", pieces.front().start);
  for (size_t i = 0; i < pieces.size(); ++i) {
    FP8T_CHECK(std::isfinite(pieces[i].value), "piece {}'s value must be finite, got {}", i + 1, pieces[i].value);
    FP8T_CHECK(pieces[i].start >= 0.0 && pieces[i].start < 1.0, "piece {}'s start must be in [0, 1), got {}", i + 1,
               pieces[i].start);
    FP8T_CHECK(i == 0 || pieces[i].start > pieces[i - 1].start,
               "piece {}'s start ({}) must come after the previous piece's ({})", i + 1, pieces[i].start,
               pieces[i - 1].start);
  }
}

double PiecewiseSchedule::at(int64_t step) const {
  double value = pieces.front().value;
  for (const Piece& p : pieces) {
    const int64_t first = static_cast<int64_t>(std::llround(p.start * static_cast<double>(total_steps)));
    if (step < first) break;  // starts increase, so no later piece has begun either
    value = p.value;
  }
  return value;
}

namespace {

std::string trimmed(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

// The whole of `text` as a finite number, or false (strtod alone accepts a prefix, "nan" and "inf").
bool parse_number(const std::string& text, double& out) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text.front()))) return false;
  errno = 0;
  char* end = nullptr;
  out = std::strtod(text.c_str(), &end);
  return *end == '\0' && errno == 0 && std::isfinite(out);
}

}  // namespace

PiecewiseSchedule parse_piecewise_schedule(const std::string& text, int64_t total_steps, double min_value,
                                           double max_value) {
  FP8T_CHECK(!text.empty(), "the schedule is empty (expected VALUE or VALUE,VALUE@START,...)");
  PiecewiseSchedule s;
  s.total_steps = total_steps;
  size_t begin = 0;
  for (size_t index = 1;; ++index) {
    const size_t comma = text.find(',', begin);
    const std::string piece =
        trimmed(text.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin));
    FP8T_CHECK(!piece.empty(), "piece {} of '{}' is empty (expected VALUE or VALUE@START)", index, text);
    const size_t at = piece.find('@');
    const std::string value_text = trimmed(piece.substr(0, at));
    PiecewiseSchedule::Piece p;
    FP8T_CHECK(parse_number(value_text, p.value), "piece '{}': the value '{}' is not a number", piece, value_text);
    FP8T_CHECK(p.value >= min_value && p.value <= max_value, "piece '{}': the value must be in [{}, {}]", piece,
               min_value, max_value);
    if (at == std::string::npos) {
      FP8T_CHECK(index == 1, "piece '{}': every piece after the first needs its start, as VALUE@START", piece);
    } else {
      const std::string start_text = trimmed(piece.substr(at + 1));
      FP8T_CHECK(parse_number(start_text, p.start), "piece '{}': the start '{}' is not a number", piece, start_text);
      FP8T_CHECK(p.start >= 0.0 && p.start < 1.0, "piece '{}': the start must be in [0, 1)", piece);
      FP8T_CHECK(index > 1 || p.start == 0.0, "piece '{}': the first piece starts at 0 (give its value alone)", piece);
      FP8T_CHECK(index == 1 || p.start > s.pieces.back().start,
                 "piece '{}': the start must come after the previous piece's ({})", piece, s.pieces.back().start);
    }
    s.pieces.push_back(p);
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  s.validate();
  return s;
}

}  // namespace fp8train::optim
