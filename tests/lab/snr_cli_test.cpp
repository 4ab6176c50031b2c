// `fp8train numerics snr` end to end: two --quick runs with the same seed (one on 1 thread, one on 2) give
// byte-identical results.csv; another seed gives another CSV; the page is written; bad arguments fail with
// a clear message and a non-zero exit.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include "lab/snr_report.h"

namespace {

struct Result {
  int exit_code;
  std::string output;
};

Result run_cli(const std::string& args, const std::string& env = "") {
  const std::string cmd = fmt::format("{} {} numerics snr {} 2>&1", env, FP8TRAIN_CLI, args);
  Result r{-1, {}};
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return r;
  char buf[4096];
  while (fgets(buf, sizeof buf, pipe)) r.output += buf;
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::filesystem::path fresh_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("fp8train_snr_cli_{}_{}", name, ::getpid());
  std::filesystem::remove_all(dir);
  return dir;
}

}  // namespace

TEST(SnrCli, QuickRunsAreDeterministicAcrossThreadCounts) {
  ASSERT_TRUE(std::filesystem::exists(FP8TRAIN_CLI)) << "the fp8train binary is missing: " << FP8TRAIN_CLI;
  const auto dir = fresh_dir("det");
  const Result a = run_cli(fmt::format("--quick --seed 7 --out {}", (dir / "a").string()), "OMP_NUM_THREADS=1");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  const Result b = run_cli(fmt::format("--quick --seed 7 --out {}", (dir / "b").string()), "OMP_NUM_THREADS=2");
  ASSERT_EQ(b.exit_code, 0) << b.output;
  const std::string csv_a = slurp(dir / "a" / "results.csv"), csv_b = slurp(dir / "b" / "results.csv");
  ASSERT_GT(csv_a.size(), 1000u);
  EXPECT_EQ(csv_a.rfind(fmt::format("{}\n", fp8train::lab::kSnrCsvHeader), 0), 0u);
  EXPECT_TRUE(csv_a == csv_b) << "same seed, different CSV";
  // Every experiment is in the CSV.
  for (int e = 1; e <= 7; ++e) EXPECT_NE(csv_a.find(fmt::format("\n{},", e)), std::string::npos) << e;
  const std::string html = slurp(dir / "a" / "report.html");
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_NE(html.find("</html>"), std::string::npos);
  const Result c = run_cli(fmt::format("--quick --samples 1 --seed 8 --out {}", (dir / "c").string()));
  ASSERT_EQ(c.exit_code, 0) << c.output;
  // The first data row is the same configuration and sample index in both files: another seed, other numbers.
  const std::string csv_c = slurp(dir / "c" / "results.csv");
  auto first_row = [](const std::string& csv) {
    const size_t start = csv.find('\n') + 1;
    return csv.substr(start, csv.find('\n', start) - start);
  };
  ASSERT_GT(csv_c.size(), 1000u);
  EXPECT_EQ(first_row(csv_c).substr(0, 20), first_row(csv_a).substr(0, 20));  // same configuration columns
  EXPECT_NE(first_row(csv_c), first_row(csv_a)) << "another seed gave the same numbers";
  std::filesystem::remove_all(dir);
}

TEST(SnrCli, BadArgumentsFailClearly) {
  ASSERT_TRUE(std::filesystem::exists(FP8TRAIN_CLI)) << "the fp8train binary is missing: " << FP8TRAIN_CLI;
  const auto dir = fresh_dir("bad");
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "a_file") << "not a directory";
  struct Case {
    std::string args;
    std::string expect;  // a piece of the message
  };
  const Case cases[] = {
      {"--samples 0", "--samples"},
      {"--samples -5", "--samples"},
      {"--samples many", "--samples"},
      {"--seed -1", "--seed"},
      {"--seed twelve", "--seed"},
      {"--bogus", "--bogus"},
      {fmt::format("--quick --out {}", (dir / "a_file").string()), "not a directory"},
  };
  for (const auto& c : cases) {
    const Result r = run_cli(c.args);
    EXPECT_NE(r.exit_code, 0) << c.args;
    EXPECT_NE(r.output.find(c.expect), std::string::npos) << c.args << " printed: " << r.output;
  }
  std::filesystem::remove_all(dir);
}
