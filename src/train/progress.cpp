// Progress line (see progress.h).
#include "train/progress.h"

#include <fmt/format.h>

#include <cmath>

namespace fp8train::train {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const long s = std::lround(seconds);
  if (s >= 3600) return fmt::format("{}h{:02d}m", s / 3600, (s % 3600) / 60);
  if (s >= 60) return fmt::format("{}m{:02d}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

std::string progress_text(const ProgressValues& v) {
  const int width = static_cast<int>(std::to_string(v.total_steps).size());
  return fmt::format("step {:>{}}/{} | next-token loss {:.4f} | total (+MTP, balance) {:.4f} | lr {:.2e} | "
                     "{:>7.0f} tok/s | {} left",
                     v.step, width, v.total_steps, v.loss_main, v.loss_total, v.lr, v.tokens_per_s,
                     format_duration(v.seconds_left));
}

Progress::Progress(std::FILE* out, bool terminal, int64_t log_every, const std::string& log_path)
    : out_(out), terminal_(terminal), log_every_(log_every < 1 ? 1 : log_every) {
  if (!log_path.empty()) log_ = std::fopen(log_path.c_str(), "ab");
}

Progress::~Progress() {
  finish();
  if (log_) std::fclose(log_);
}

void Progress::log_line(const std::string& text) {
  if (!log_) return;
  std::fputs(text.c_str(), log_);
  std::fputc('\n', log_);
  std::fflush(log_);
}

void Progress::update(const ProgressValues& v) {
  const std::string text = progress_text(v);
  last_text_ = text;
  status_open_ = false;
  const bool last = v.step >= v.total_steps;
  const bool log_step = v.step == 1 || v.step % log_every_ == 0 || last;
  if (log_step) log_line(text);
  if (terminal_) {
    const auto now = std::chrono::steady_clock::now();
    if (!last && line_open_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    std::fprintf(out_, "\r\x1b[K%s", text.c_str());
    line_open_ = true;
    if (last) finish();
  } else if (log_step) {
    std::fprintf(out_, "%s\n", text.c_str());
  }
  std::fflush(out_);
}

void Progress::message(const std::string& text) {
  log_line(text);
  if (terminal_ && line_open_) std::fputs("\r\x1b[K", out_);
  std::fprintf(out_, "%s\n", text.c_str());
  if (terminal_ && line_open_) {
    if (status_open_) {
      line_open_ = false;  // a finished status is not drawn again
    } else if (!last_text_.empty()) {
      std::fputs(last_text_.c_str(), out_);
    }
  }
  status_open_ = false;
  status_logged_ = false;
  std::fflush(out_);
}

void Progress::status(const std::string& text) {
  const auto now = std::chrono::steady_clock::now();
  const bool plain = !status_logged_ || now - last_status_line_ >= std::chrono::seconds(10);
  if (plain) {
    log_line(text);
    last_status_line_ = now;
    status_logged_ = true;
  }
  if (terminal_) {
    if (line_open_ && status_open_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    std::fprintf(out_, "\r\x1b[K%s", text.c_str());
    line_open_ = true;
    status_open_ = true;
  } else if (plain) {
    std::fprintf(out_, "%s\n", text.c_str());
  }
  std::fflush(out_);
}

void Progress::log_only(const std::string& text) { log_line(text); }

void Progress::finish() {
  if (terminal_ && line_open_) {
    std::fputc('\n', out_);
    std::fflush(out_);
  }
  line_open_ = false;
}

}  // namespace fp8train::train
