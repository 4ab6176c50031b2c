// `fp8train compare` end to end on a tiny run: two recipes trained on the same batches, compare.json with the
// documented fields (relative error, memory table with ratios, per-tenth errors), compare.html with its charts,
// the numerics-health samples (operand counters, GEMM error vs FP32) and memory in metrics.jsonl, the GEMM-error
// summary in compare.json / compare.html / report.html; a bad recipe spec is one clear line and exit 1; a finished
// run is reused only when its resolved configuration is identical; every invocation gets a fresh default folder;
// --analyze-only refuses run folders that do not match their recipe labels; the optimizer moments follow the
// recipe exactly as in `train`.
// FP8TRAIN_CLI_UNDER_TEST (environment) runs the cases against another build of the CLI.
#include <gtest/gtest.h>

#include <unistd.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

namespace fs = std::filesystem;

namespace {
std::string cli_path() {
  const char* other = std::getenv("FP8TRAIN_CLI_UNDER_TEST");
  return other && *other ? other : FP8TRAIN_CLI;
}
// Runs the CLI (in `cwd` when given), stdout and stderr together into *output; returns the exit code.
int run(const std::string& args, std::string* output, const fs::path& cwd = {}) {
  const std::string cd = cwd.empty() ? "" : "cd '" + cwd.string() + "' && ";
  const std::string cmd = cd + cli_path() + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  std::string out;
  while (fgets(buf, sizeof buf, p)) out += buf;
  const int status = pclose(p);
  if (output) *output = out;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}
std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}
}  // namespace

TEST(CompareCli, TwoRecipesEndToEnd) {
  const fs::path dir = fs::temp_directory_path() / ("fp8train_compare_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  std::string out;
  const int rc = run("compare --recipes bf16,fp8-deepseek --preset tiny --steps 3 --batch-size 2 --seq-len 64 "
                     "--eval-every 0 --eval-batches 1 --health-every 2 --corpus-bytes 20000 --threads 2 --out " +
                         dir.string(),
                     &out);
  ASSERT_EQ(rc, 0) << out;
  const nlohmann::json doc = nlohmann::json::parse(slurp(dir / "compare.json"));
  EXPECT_EQ(doc["baseline"], "bf16");
  ASSERT_EQ(doc["recipes"].size(), 2u);
  const auto& base = doc["recipes"][0];
  const auto& fp8 = doc["recipes"][1];
  EXPECT_EQ(fp8["recipe"], "fp8-deepseek");
  EXPECT_EQ(fp8["steps"].get<double>(), 3.0);
  EXPECT_EQ(base["relative_loss_error_vs_baseline"].get<double>(), 0.0);
  EXPECT_GT(fp8["relative_loss_error_vs_baseline"].get<double>(), 0.0);  // FP8 changes the numbers
  EXPECT_LT(fp8["relative_loss_error_vs_baseline"].get<double>(), 0.05);
  EXPECT_EQ(fp8["relative_loss_error_by_tenth"].size(), 10u);
  // The signed difference: never larger than the error in magnitude, and equal to it when every step of the last
  // tenth is on one side of the baseline.
  const double diff = fp8["relative_loss_difference_vs_baseline"].get<double>();
  EXPECT_LE(std::fabs(diff), fp8["relative_loss_error_vs_baseline"].get<double>() + 1e-15);
  EXPECT_NE(diff, 0.0);
  EXPECT_EQ(base["relative_loss_difference_vs_baseline"].get<double>(), 0.0);
  ASSERT_EQ(fp8["relative_loss_difference_by_tenth"].size(), 10u);
  for (size_t t = 0; t < 10; ++t) {
    if (!fp8["relative_loss_error_by_tenth"][t].is_number()) continue;
    EXPECT_LE(std::fabs(fp8["relative_loss_difference_by_tenth"][t].get<double>()),
              fp8["relative_loss_error_by_tenth"][t].get<double>() + 1e-15);
  }
  for (const char* k : {"master_weights_bytes", "compute_weights_bytes", "gradient_bytes", "optimizer_state_bytes",
                        "activation_cache_peak_bytes"}) {
    ASSERT_TRUE(fp8["memory_bytes"].contains(k)) << k;
    EXPECT_GT(fp8["memory_bytes"][k].get<double>(), 0) << k;
  }
  // 128 tokens over 8 experts: each expert's rows are padded to the grouped FP8 GEMM's 128-row block, which here
  // costs most of what FP8 saves (ModelRecipe.ActivationAndOptimizerMemoryRatios checks the ratio at a size where
  // the padding is what a real batch pays).
  EXPECT_LT(fp8["memory_ratio_vs_baseline"]["activation_cache_peak_bytes"].get<double>(), 1.0);
  EXPECT_LE(fp8["memory_ratio_vs_baseline"]["optimizer_state_bytes"].get<double>(), 0.75);
  EXPECT_EQ(fp8["memory_ratio_vs_baseline"]["master_weights_bytes"].get<double>(), 1.0);
  // GEMM error against the FP32 reference from the sampled step: bf16 small, fp8 larger, both present.
  for (const char* kind : {"fprop", "dgrad", "wgrad"}) {
    SCOPED_TRACE(kind);
    ASSERT_TRUE(base["gemm_relative_error"].contains(kind));
    ASSERT_TRUE(fp8["gemm_relative_error"].contains(kind));
    EXPECT_EQ(fp8["gemm_relative_error"][kind]["samples"], 1);
    const double b = base["gemm_relative_error"][kind]["mean"].get<double>();
    const double f = fp8["gemm_relative_error"][kind]["mean"].get<double>();
    // bf16's Wgrad multiplies the BF16 activations and gradients exactly as the FP32 reference does
    if (std::string(kind) == "wgrad") {
      EXPECT_EQ(b, 0.0);
    } else {
      EXPECT_GT(b, 0.0);
    }
    EXPECT_LT(b, 0.02);
    EXPECT_GT(f, 2 * b);
    EXPECT_GT(f, 1e-3);
    EXPECT_LT(f, 0.2);
  }
  const std::string html = slurp(dir / "compare.html");
  EXPECT_NE(html.find("GEMM error against the FP32 reference"), std::string::npos);
  EXPECT_NE(slurp(dir / "fp8-deepseek" / "report.html").find("GEMM error vs FP32 reference"), std::string::npos);
  EXPECT_NE(html.find("Relative loss error vs bf16"), std::string::npos);
  EXPECT_NE(html.find("Memory per recipe"), std::string::npos);
  // Health and memory sampled at step 2 of the fp8 run.
  std::ifstream metrics(dir / "fp8-deepseek" / "metrics.jsonl");
  std::string line;
  int with_health = 0;
  while (std::getline(metrics, line)) {
    const nlohmann::json row = nlohmann::json::parse(line);
    if (!row.contains("health")) continue;
    ++with_health;
    EXPECT_EQ(row["step"], 2);
    EXPECT_TRUE(row.contains("memory"));
    bool fprop = false, dgrad = false, wgrad = false;
    for (const auto& g : row["health"]) {
      fprop |= g["gemm"] == "fprop";
      dgrad |= g["gemm"] == "dgrad";
      wgrad |= g["gemm"] == "wgrad";
      EXPECT_GE(g["a"]["elements"].get<int64_t>(), g["a"]["underflow"].get<int64_t>());
      EXPECT_GT(g["rel_error"].get<double>(), 0.0);
      EXPECT_NEAR(g["rel_error"].get<double>(), std::sqrt(g["err_sq"].get<double>() / g["ref_sq"].get<double>()),
                  1e-12);
    }
    EXPECT_TRUE(fprop && dgrad && wgrad);
    ASSERT_TRUE(row.contains("gemm_error"));
    EXPECT_GT(row["gemm_error"]["wgrad"]["linears"].get<int>(), 0);
  }
  EXPECT_EQ(with_health, 1);
  fs::remove_all(dir);
}

TEST(CompareCli, BadRecipeIsOneClearLine) {
  std::string out;
  EXPECT_EQ(run("compare --recipes bf16,fp8-deepseek:promote=100 --out /tmp/never-created-h7", &out), 1);
  EXPECT_NE(out.find("promote"), std::string::npos) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  EXPECT_FALSE(fs::exists("/tmp/never-created-h7"));
}

namespace {
// A two-second comparison: the tiny test model, two steps (kSmallCompare: bf16 against fp32).
const std::string kSmallRun =
    " --preset tiny --hidden-size 32 --n-heads 2 --q-lora-rank 16 --kv-lora-rank 16 "
    "--steps 2 --batch-size 2 --seq-len 32 --eval-every 0 --eval-batches 1 --final-eval-windows 2 "
    "--corpus-bytes 20000 --threads 1";
const std::string kSmallCompare = "compare --recipes bf16,fp32" + kSmallRun;

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() / ("fp8train_compare_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};
}  // namespace

TEST(CompareCli, ReusesOnlyAnIdenticalRunAndDefaultsToAFreshFolder) {
  TempDir dir("reuse");
  const std::string out = " --out '" + (dir.path / "c").string() + "'";
  std::string text;
  ASSERT_EQ(run(kSmallCompare + out, &text), 0) << text;
  const std::string metrics = slurp(dir.path / "c" / "bf16" / "metrics.jsonl");
  // Identical configuration: reused.
  ASSERT_EQ(run(kSmallCompare + out, &text), 0) << text;
  EXPECT_NE(text.find("compare: bf16 already finished"), std::string::npos) << text;
  // A different learning rate, data or model is not the same run: refused, naming the difference, and the
  // finished runs stay as they were.
  EXPECT_EQ(run(kSmallCompare + " --lr 0.001" + out, &text), 1) << text;
  EXPECT_NE(text.find("optim.lr"), std::string::npos) << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  std::ofstream(dir.path / "data.txt") << std::string(20000, 'x');
  EXPECT_EQ(run(kSmallCompare + " --data '" + (dir.path / "data.txt").string() + "'" + out, &text), 1);
  EXPECT_NE(text.find("data.path"), std::string::npos) << text;
  EXPECT_EQ(run(kSmallCompare + " --n-layers 3" + out, &text), 1);
  EXPECT_NE(text.find("model.n_layers"), std::string::npos) << text;
  EXPECT_EQ(slurp(dir.path / "c" / "bf16" / "metrics.jsonl"), metrics);
  // The charts fit a two-step run: no 20- or 50-step moving averages.
  const std::string html = slurp(dir.path / "c" / "compare.html");
  EXPECT_EQ(html.find("moving average of 20 steps"), std::string::npos);
  EXPECT_EQ(html.find("moving average of 50 steps"), std::string::npos);

  // Without --out: a fresh runs/compare-<date>-<time> folder per invocation, even two in the same second.
  fs::create_directories(dir.path / "cwd");
  ASSERT_EQ(run(kSmallCompare, &text, dir.path / "cwd"), 0) << text;
  ASSERT_EQ(run(kSmallCompare, &text, dir.path / "cwd"), 0) << text;
  int folders = 0;
  for (const auto& e : fs::directory_iterator(dir.path / "cwd" / "runs")) {
    EXPECT_EQ(e.path().filename().string().rfind("compare-", 0), 0u) << e.path();
    EXPECT_TRUE(fs::exists(e.path() / "compare.json")) << e.path();
    ++folders;
  }
  EXPECT_EQ(folders, 2);

  // --analyze-only: a folder must hold a run of the recipe it is labelled with, and the runs must be comparable.
  const std::string dirs = (dir.path / "c" / "bf16").string() + "," + (dir.path / "c" / "fp32").string();
  EXPECT_EQ(run("compare --analyze-only --recipes fp8-deepseek,fp32 --run-dirs " + dirs + " --out '" +
                    (dir.path / "a").string() + "'",
                &text),
            1);
  EXPECT_NE(text.find("recipe 'bf16', not 'fp8-deepseek'"), std::string::npos) << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  ASSERT_EQ(run("compare --recipes fp32" + kSmallRun + " --lr 0.001 --out '" + (dir.path / "d").string() + "'", &text), 0)
      << text;
  EXPECT_EQ(run("compare --analyze-only --recipes bf16,fp32 --run-dirs " + (dir.path / "c" / "bf16").string() + "," +
                    (dir.path / "d" / "fp32").string() + " --out '" + (dir.path / "a").string() + "'",
                &text),
            1);
  EXPECT_NE(text.find("optim.lr"), std::string::npos) << text;
  EXPECT_EQ(run("compare --analyze-only --recipes bf16,fp32 --run-dirs " + dirs + " --out '" + (dir.path / "a").string() + "'", &text), 0)
      << text;
}

TEST(CompareCli, MomentsFollowTheRecipeAsInTrain) {
  TempDir dir("moments");
  std::string text;
  ASSERT_EQ(run("compare --recipes bf16,bf16:moments=bf16,fp8-deepseek:moments=fp32" + kSmallRun + " --out '" +
                    dir.path.string() + "'",
                &text),
            0)
      << text;
  const auto moments = [&](const char* run_dir) {
    return nlohmann::json::parse(slurp(dir.path / run_dir / "config.json"))["optim"]["moment_dtype"].get<std::string>();
  };
  EXPECT_EQ(moments("bf16"), "fp32");
  EXPECT_EQ(moments("bf16_moments-bf16"), "bf16");
  EXPECT_EQ(moments("fp8-deepseek_moments-fp32"), "fp32");
  // An explicit --moment-dtype that contradicts a spec's ":moments=" is refused, as in `train`, not silently preferred.
  EXPECT_EQ(run("compare --recipes bf16,bf16:moments=bf16 --moment-dtype fp32" + kSmallRun + " --out '" +
                    (dir.path / "conflict").string() + "'",
                &text),
            1);
  EXPECT_NE(text.find("asks for moments=bf16"), std::string::npos) << text;
  EXPECT_FALSE(fs::exists(dir.path / "conflict" / "bf16")) << "nothing is trained before the settings are checked";
}
