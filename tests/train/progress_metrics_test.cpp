// Progress line (terminal redraw vs plain log lines, messages not torn) and the metrics helpers
// (documented key order, nulls for non-finite values, load ratio, truncation on resume, torn last line, the
// quantized operands' saturation and underflow per tensor role).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include "train/atomic_file.h"
#include "train/metrics.h"
#include "train/progress.h"

using namespace fp8train::train;
namespace fs = std::filesystem;

namespace {
std::string read_all(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  return out;
}
ProgressValues values(int64_t step) { return {step, 30, 2.5, 2.75, 1e-3, 1234.0, 65.0}; }
}  // namespace

TEST(Progress, PlainLinesEveryLogEveryStepsWhenNotATerminal) {
  std::FILE* out = std::tmpfile();
  const fs::path log = fs::temp_directory_path() / ("fp8train-progress-" + std::to_string(::getpid()) + ".log");
  {
    Progress p(out, /*terminal=*/false, /*log_every=*/10, log.string());
    for (int64_t s = 1; s <= 30; ++s) p.update(values(s));
    p.message("step 30: held-out loss 1.0");
  }
  const std::string text = read_all(out);
  EXPECT_EQ(text.find('\r'), std::string::npos);
  EXPECT_EQ(text.find("\x1b["), std::string::npos);
  // steps 1, 10, 20, 30 and the message: five lines
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 5) << text;
  // The loss is named: the next-token loss (what the held-out evaluation measures) and the total with MTP and
  // balance terms (what the gradient is of).
  EXPECT_NE(text.find("step 20/30 | next-token loss 2.5000 | total (+MTP, balance) 2.7500 | lr 1.00e-03 |    1234 "
                      "tok/s | 1m05s left"),
            std::string::npos)
      << text;
  EXPECT_EQ(read_file(log.string()), text);  // train.log holds the same plain lines
  fs::remove(log);
  std::fclose(out);
}

TEST(Progress, RedrawsInPlaceOnATerminalAndKeepsMessagesWhole) {
  std::FILE* out = std::tmpfile();
  {
    Progress p(out, /*terminal=*/true, 10, "");
    p.update(values(1));
    p.message("evaluation done");
    p.update(values(30));  // the last step always draws, then ends the line
  }
  const std::string text = read_all(out);
  EXPECT_EQ(text.rfind("\r\x1b[Kstep  1/30", 0), 0u) << text;
  // The message clears the progress line, prints on its own line, then redraws the progress line.
  EXPECT_NE(text.find("\r\x1b[Kevaluation done\nstep  1/30"), std::string::npos) << text;
  EXPECT_NE(text.find("\r\x1b[Kstep 30/30"), std::string::npos);
  EXPECT_EQ(text.back(), '\n');
  std::fclose(out);
}

TEST(Progress, StatusLinesShowALongTaskWithoutClutteringTheLog) {
  std::FILE* plain = std::tmpfile();
  {
    Progress p(plain, /*terminal=*/false, 10, "");
    p.status("final evaluation 1/3 windows");
    p.status("final evaluation 2/3 windows");  // within 10 s of the first: not printed
    p.message("step 30: held-out loss 1.0");
  }
  EXPECT_EQ(read_all(plain), "final evaluation 1/3 windows\nstep 30: held-out loss 1.0\n");
  std::fclose(plain);
  std::FILE* term = std::tmpfile();
  {
    Progress p(term, /*terminal=*/true, 10, "");
    p.update(values(30));
    p.status("final evaluation 1/3 windows");
    p.message("step 30: held-out loss 1.0");  // the finished status is not drawn again
  }
  const std::string text = read_all(term);
  EXPECT_NE(text.find("\r\x1b[Kfinal evaluation 1/3 windows\r\x1b[Kstep 30: held-out loss 1.0\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("1.0\nfinal evaluation"), std::string::npos) << text;
  std::fclose(term);
}

TEST(Progress, DurationsReadNaturally) {
  EXPECT_EQ(format_duration(42.4), "42s");
  EXPECT_EQ(format_duration(185), "3m05s");
  EXPECT_EQ(format_duration(3720), "1h02m");
  EXPECT_EQ(format_duration(std::nan("")), "?");
}

TEST(Metrics, StepObjectHasTheDocumentedKeysInOrderAndNullsForNonFinite) {
  StepMetrics m;
  m.step = 7;
  m.loss = std::nan("");
  m.lr = 1e-3;
  m.mtp_lambda = 0.3;
  m.bias_update_speed = 0.0;
  const std::string line = step_metrics_json(m).dump();
  EXPECT_EQ(line.rfind(R"({"step":7,"loss":null,"loss_main":0.0,"loss_mtp":0.0,"loss_balance":0.0,"lr":0.001,)"
                       R"("mtp_lambda":0.3,"bias_update_speed":0.0,)",
                       0),
            0u)
      << line;
  EXPECT_NE(line.find(R"("tokens_per_s":0.0,"grad_norm":0.0,"max_expert_load_ratio":0.0})"), std::string::npos)
      << line;
}

TEST(Metrics, MaxExpertLoadRatio) {
  EXPECT_DOUBLE_EQ(max_expert_load_ratio({{1, 1, 1, 1}}), 1.0);
  EXPECT_DOUBLE_EQ(max_expert_load_ratio({{1, 1, 1, 1}, {4, 0, 0, 0}}), 4.0);
  EXPECT_DOUBLE_EQ(max_expert_load_ratio({}), 0.0);
}

TEST(Metrics, TruncationKeepsEarlierStepsAndSurvivesATornLine) {
  const fs::path p = fs::temp_directory_path() / ("fp8train-metrics-" + std::to_string(::getpid()) + ".jsonl");
  write_file_atomic(p.string(), "{\"step\":1}\n{\"step\":2}\n{\"step\":3}\n{\"step\":4,\"lo");  // torn last line
  EXPECT_EQ(read_jsonl(p.string()).size(), 3u);
  truncate_jsonl_after_step(p.string(), 2);
  const auto rows = read_jsonl(p.string());
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows.back()["step"], 2);
  {
    JsonlWriter w(p.string());
    w.write({{"step", 3}});
  }
  EXPECT_EQ(read_jsonl(p.string()).size(), 3u);
  fs::remove(p);
  EXPECT_TRUE(read_jsonl(p.string()).empty());  // a missing file reads as no lines
}

TEST(Metrics, QuantizationHealthSumsTheOperandsPerTensorRole) {
  const nlohmann::json health = nlohmann::json::parse(R"([
    {"gemm": "fprop", "a": {"elements": 100, "nonzero": 80, "saturated": 1, "underflow": 4},
                      "b": {"elements": 50, "nonzero": 50, "saturated": 0, "underflow": 5}},
    {"gemm": "dgrad", "a": {"elements": 100, "nonzero": 100, "saturated": 3, "underflow": 10},
                      "b": {"elements": 50, "nonzero": 50, "saturated": 0, "underflow": 0}},
    {"gemm": "wgrad", "a": {"elements": 100, "nonzero": 100, "saturated": 0, "underflow": 10},
                      "b": {"elements": 100, "nonzero": 80, "saturated": 0, "underflow": 4}}])");
  const nlohmann::ordered_json q = quantization_health_summary(health);
  // activations = fprop a + wgrad b; weights = fprop b + dgrad b; gradients = dgrad a + wgrad a
  EXPECT_DOUBLE_EQ(q["activations"]["saturated_fraction"].get<double>(), 1.0 / 200);
  EXPECT_DOUBLE_EQ(q["activations"]["underflow_fraction"].get<double>(), 8.0 / 160);
  EXPECT_DOUBLE_EQ(q["weights"]["underflow_fraction"].get<double>(), 5.0 / 100);
  EXPECT_DOUBLE_EQ(q["gradients"]["saturated_fraction"].get<double>(), 3.0 / 200);
  EXPECT_DOUBLE_EQ(q["gradients"]["underflow_fraction"].get<double>(), 20.0 / 200);
  // Unquantized recipes record no operand counters.
  EXPECT_TRUE(quantization_health_summary(nlohmann::json::parse(R"([{"gemm": "fprop", "rel_error": 0.001}])")).is_null());
}
