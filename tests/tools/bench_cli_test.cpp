// `fp8train bench` on a machine without a GPU (CI): runs the built CLI (FP8TRAIN_CLI) and checks that
//   - with CUDA built in, every bad `bench gemm` option fails with exit code 1, a sentence on stderr naming the
//     option or value, and nothing on stdout -- before the device is touched, so the same holds on a GPU machine;
//   - without CUDA, `bench` says it needs a CUDA build and fails.
// (The benchmark itself, with every option, runs in tests/cuda/bench_gemm_cli_test.cpp on a Hopper GPU.)
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace fs = std::filesystem;

namespace {

struct CliRun {
  int exit_code = -1;  // -1: did not exit normally (crash)
  std::string out, err;
};

class BenchCli : public ::testing::Test {
 protected:
  void SetUp() override {
    work_ = fs::path(::testing::TempDir()) / ("fp8train_bench_cli_" + std::to_string(::getpid()));
    fs::create_directories(work_);
  }
  void TearDown() override { fs::remove_all(work_); }

  CliRun run(const std::string& args) {
    const fs::path out = work_ / "stdout.txt", err = work_ / "stderr.txt";
    const std::string cmd = std::string("'") + FP8TRAIN_CLI + "' bench " + args + " > '" + out.string() + "' 2> '" +
                            err.string() + "'";
    const int status = std::system(cmd.c_str());
    CliRun r;
    if (status != -1 && WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
    auto slurp = [](const fs::path& p) {
      std::ifstream in(p);
      std::stringstream ss;
      ss << in.rdbuf();
      return ss.str();
    };
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
  }

  fs::path work_;
};

#if FP8TRAIN_HAVE_CUDA
TEST_F(BenchCli, BadGemmOptionsFailClearlyBeforeTouchingTheDevice) {
  const std::pair<const char*, const char*> cases[] = {
      {"--family dense,sparse", "unknown family 'sparse'"},
      {"--family ''", "unknown family ''"},
      {"--scales col-major", "--scales 'col-major'"},
      {"--config 'block=128x999'", "block columns = '999'"},
      {"--config 'heuristic;;'", "--config 'heuristic;;' has an empty entry"},
      {"--config 'tile=64'", "unknown key 'tile'"},
      {"--shapes 128x256", "cannot read shape '128x256'"},
      {"--shapes 0x256x512", "must be positive"},
      {"--grouped-shapes 8x4096", "--grouped-shapes: cannot read '8x4096'"},
      {"--grouped-shapes '0x4096:4096x7168'", "'0' in '0x4096:4096x7168' must be a positive integer"},
      {"--grouped-shapes '0,0:4096x7168'", "'0,0:4096x7168' has no tokens"},
      {"--kgrouped-shapes '8x2048:4096'", "must end in two dimensions"},
      {"--check -1", "--check -1 must be >= 0"},
  };
  for (const auto& [args, message] : cases) {
    SCOPED_TRACE(args);
    const CliRun r = run(std::string("gemm ") + args);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("CUDA"), std::string::npos)
        << "the device was touched before the options were read: " << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
}
#else
TEST_F(BenchCli, WithoutCudaBenchSaysSoAndFails) {
  const CliRun r = run("gemm");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("built without CUDA"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}
#endif

}  // namespace
