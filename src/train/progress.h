// The progress line: "step 120/300 | next-token loss 2.0012 | total (+MTP, balance) 2.1345 | lr 2.40e-03 |
// 4321 tok/s | 1m23s left" (the total is what the gradient is of; the next-token loss is what the held-out
// evaluation measures).
// On a terminal it redraws in place ("\r" + clear-to-end-of-line) at most 10 times a second; elsewhere (a log
// file, a pipe) it prints a plain line every `log_every` steps and on the last step. Messages (evaluation
// results, skipped steps, checkpoints) go on their own lines without tearing the progress line. Every plain
// line is also appended to RUN/train.log when a log path is given. A status line (e.g. the final evaluation's
// "final evaluation 512/2048 windows | 40s left") redraws the same way on a terminal and is printed as a plain
// line at most every 10 seconds elsewhere.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace fp8train::train {

struct ProgressValues {
  int64_t step = 0;  // steps done (1-based)
  int64_t total_steps = 0;
  double loss_main = 0;   // next-token cross-entropy
  double loss_total = 0;  // + MTP + balance: what the gradient is of
  double lr = 0;
  double tokens_per_s = 0;
  double seconds_left = 0;
};

// "1h02m", "3m05s", "42s".
std::string format_duration(double seconds);
// The progress line text (without "\r" or newline).
std::string progress_text(const ProgressValues& v);

class Progress {
 public:
  // `out` is usually stderr; `terminal` decides the redraw mode (pass isatty(fileno(out))).
  Progress(std::FILE* out, bool terminal, int64_t log_every, const std::string& log_path);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void update(const ProgressValues& v);
  void message(const std::string& text);  // a whole line
  void status(const std::string& text);   // a transient line (redrawn; plain at most every 10 s)
  void log_only(const std::string& text); // a line for train.log only
  void finish();                          // ends a redrawn line with a newline

 private:
  void log_line(const std::string& text);

  std::FILE* out_;
  bool terminal_;
  int64_t log_every_;
  std::FILE* log_ = nullptr;
  bool line_open_ = false;
  bool status_open_ = false;    // the open line is a status line (not redrawn after a message)
  bool status_logged_ = false;  // a plain status line was printed since the last message
  std::string last_text_;
  std::chrono::steady_clock::time_point last_draw_{}, last_status_line_{};
};

}  // namespace fp8train::train
