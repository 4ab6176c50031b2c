// `fp8train dist schedule` end to end: the DualPipeV timeline for 4 and 8 ranks (one line of cells per rank, as
// wide as the makespan), the measured bubble equal to DeepSeek's formula in its JSON line, and bad arguments
// refused with a clear message and a non-zero exit.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "../common/cli_runner.h"

namespace fs = std::filesystem;
using fp8train::test::CliResult;

namespace {

class DistCli : public ::testing::Test {
 protected:
  void SetUp() override {
    work_ = fs::path(::testing::TempDir()) / ("fp8train_dist_cli_" + std::to_string(::getpid()));
    fs::create_directories(work_);
  }
  void TearDown() override { fs::remove_all(work_); }
  CliResult run(const std::string& args) {
    return fp8train::test::run_cli(FP8TRAIN_CLI, "dist schedule " + args, work_);
  }

  static std::vector<std::string> lines(const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string l; std::getline(in, l);) out.push_back(l);
    return out;
  }
  static nlohmann::json json_line(const CliResult& r) {
    nlohmann::json j;
    int count = 0;
    for (const auto& l : lines(r.out))
      if (!l.empty() && l.front() == '{') {
        j = nlohmann::json::parse(l);
        ++count;
      }
    EXPECT_EQ(count, 1) << r.out;
    return j;
  }
  fs::path work_;
};

TEST_F(DistCli, PrintsTimelineAndBubbleEqualToFormula) {
  for (const auto& [pp, mbs, args, formula] : std::vector<std::tuple<int, int, std::string, double>>{
           {4, 10, "", 6.0}, {4, 10, "--fb 2", 3.0}, {8, 16, "", 14.0}, {8, 20, "--f 2 --b 4 --w 2 --fb 5", 21.0}}) {
    const CliResult r = run("--pp " + std::to_string(pp) + " --micro-batches " + std::to_string(mbs) + " " + args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json j = json_line(r);
    EXPECT_EQ(j["bubble_max"].get<double>(), formula) << args;
    EXPECT_EQ(j["bubble_formula"].get<double>(), formula) << args;
    EXPECT_EQ(j["ranks"].size(), static_cast<size_t>(pp));
    const auto width = static_cast<size_t>(j["makespan"].get<double>());
    int rank_lines = 0;
    for (const auto& l : lines(r.out))
      if (l.rfind("rank ", 0) == 0 && l.find("busy") == std::string::npos) {
        EXPECT_EQ(l.size(), 9 + width) << l;
        ++rank_lines;
      }
    EXPECT_EQ(rank_lines, pp);
    EXPECT_NE(r.out.find("; equal"), std::string::npos) << r.out;
  }
}

TEST_F(DistCli, RefusesBadArguments) {
  for (const auto& [args, message] : std::vector<std::pair<std::string, std::string>>{
           {"--pp 4 --micro-batches 7", "at least 8 micro-batches"},
           {"--pp 4 --micro-batches 8 --b 1 --w 1", "must exceed its weight part"},
           {"--pp 4 --micro-batches 8 --fb 1", "must be at least the longer"},
           {"--pp 1 --micro-batches 8", "--pp"}}) {
    const CliResult r = run(args);
    EXPECT_NE(r.exit_code, 0) << args;
    EXPECT_NE(r.err.find(message), std::string::npos) << args << ": " << r.err;
  }
}

}  // namespace
