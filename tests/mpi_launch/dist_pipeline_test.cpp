// `mpiexec -np N fp8train dist pipeline` end to end on CPU ranks (ctest label `mpi`): one DualPipeV training step
// of the model (tiny preset's dimensions, 2N blocks, fp32 recipe) on 2 and 4 ranks gives the loss of the same
// micro-batches run one after another on one rank, gradients equal to FP32 summation order (only the embedding's,
// which stage 0 and MTP add into in another interleaving, may differ in the last bits), and each rank sends and
// receives exactly one activation and one gradient per micro-batch and boundary; and its refusals.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "../common/cli_runner.h"

namespace fs = std::filesystem;
using fp8train::test::CliResult;

namespace {

class DistPipeline : public ::testing::Test {
 protected:
  void SetUp() override {
    // OpenMPI refuses root without these (CI containers); harmless otherwise. ctest sets them too.
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
    setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 0);
    work_ = fs::temp_directory_path() / fmt::format("fp8train_dist_pipeline_{}", getpid());
    fs::create_directories(work_);
  }
  void TearDown() override { fs::remove_all(work_); }

  // ranks = 0: the CLI alone; otherwise under mpiexec.
  CliResult run(int ranks, const std::string& args) {
    const std::string launcher =
        ranks == 0 ? std::string() : fmt::format("'{}' -n {} --oversubscribe ", FP8TRAIN_MPIEXEC, ranks);
    return fp8train::test::run_cli(FP8TRAIN_CLI, "dist pipeline " + args, work_, launcher);
  }
  static nlohmann::json json_line(const CliResult& r) {
    std::istringstream in(r.out);
    nlohmann::json j;
    int count = 0;
    for (std::string l; std::getline(in, l);)
      if (!l.empty() && l.front() == '{') {
        j = nlohmann::json::parse(l);
        ++count;
      }
    EXPECT_EQ(count, 1) << "one JSON line, from rank 0 only:\n" << r.out;
    return j;
  }
  fs::path work_;
};

TEST_F(DistPipeline, OneStepOfTheModelMatchesOneRank) {
  for (int ranks : {2, 4}) {
    const int mbs = 2 * ranks + 1;
    const CliResult r = run(ranks, fmt::format("--micro-batches {} --seq-len 16", mbs));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json j = json_line(r);
    EXPECT_EQ(j["pp"], ranks);
    EXPECT_EQ(j["layers"], 2 * ranks);
    const double loss = j["loss_pipeline"], want = j["loss_sequential"];
    EXPECT_GT(loss, 1.0);
    EXPECT_NEAR(loss, want, 1e-12 * want) << ranks << " ranks";
    const double diff = j["grad_max_diff"], largest = j["grad_max"];
    EXPECT_GT(largest, 1e-3);
    EXPECT_LE(diff, 1e-6 * largest) << ranks << " ranks";
    ASSERT_EQ(j["ranks"].size(), static_cast<size_t>(ranks));
    // tiny: hidden 192; FP32 activations of 2 × 16 tokens: 24,576 bytes a tensor, 2 per micro-batch and boundary.
    for (int q = 0; q < ranks; ++q) {
      const nlohmann::json& row = j["ranks"][static_cast<size_t>(q)];
      const int boundaries = (q < ranks - 1 ? 1 : 0) + (q > 0 ? 1 : 0);
      EXPECT_EQ(row["bytes_expected"].get<int64_t>(), 2 * boundaries * mbs * 2 * 16 * 192 * 4);
      EXPECT_EQ(row["bytes_sent"].get<double>(), row["bytes_expected"].get<double>()) << "rank " << q;
      EXPECT_EQ(row["bytes_received"].get<double>(), row["bytes_expected"].get<double>()) << "rank " << q;
      // The W steps carry the Wgrad GEMMs: each of the rank's two blocks has at least 7 Linears (MLA's 5, a dense
      // or routed + shared FFN's 2 or 4), once per micro-batch.
      EXPECT_GE(row["wgrad_gemms_in_w"].get<double>(), 2.0 * 7 * mbs) << "rank " << q;
    }
  }
}

TEST_F(DistPipeline, RefusesWhatItCannotRun) {
  const CliResult one = run(0, "");
  EXPECT_NE(one.exit_code, 0);
  EXPECT_NE(one.err.find("needs at least 2"), std::string::npos) << one.err;
  const CliResult few = run(2, "--micro-batches 3");
  EXPECT_NE(few.exit_code, 0);
  EXPECT_NE(few.err.find("at least 4 micro-batches"), std::string::npos) << few.err;
  const CliResult blocks = run(2, "--layers 3");
  EXPECT_NE(blocks.exit_code, 0);
  EXPECT_NE(blocks.err.find("at least one block each"), std::string::npos) << blocks.err;
}

}  // namespace
