// `fp8train bench gemm` end to end on a Hopper GPU: the built CLI (FP8TRAIN_CLI) on small shapes with every
// option of the kernel work (all families, --sweep, --split-sweep, --floor, --clean-flush, --scales both, a
// --config list), its JSON lines parsed with nlohmann-json. Checks that every configuration of ours ran and
// passed the sampled bit-exactness check against the CPU Hopper model, that each family, scale layout and
// variant origin appears, that the floor rows exist for the few-row shape, and that a configuration the
// family does not build fails the command with the error in its JSON line.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fs = std::filesystem;

namespace {

struct BenchRun {
  int exit_code = -1;
  std::vector<nlohmann::json> lines;
  std::string err;
};

BenchRun run_bench(const std::string& args) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("fp8train_bench_gemm_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path out = dir / "stdout.txt", err = dir / "stderr.txt";
  const std::string cmd = std::string("'") + FP8TRAIN_CLI + "' bench gemm " + args + " > '" + out.string() + "' 2> '" +
                          err.string() + "'";
  const int status = std::system(cmd.c_str());
  BenchRun r;
  if (status != -1 && WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  std::ifstream in(out);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) r.lines.push_back(nlohmann::json::parse(line));
  std::ifstream ein(err);
  std::stringstream ss;
  ss << ein.rdbuf();
  r.err = ss.str();
  fs::remove_all(dir);
  return r;
}

TEST(BenchGemmCli, EveryOptionRunsAndEveryConfigurationOfOursIsBitExact) {
  const BenchRun r = run_bench(
      "--shapes '512x256x512;128x2048x1024' --grouped-shapes '2x200:256x512;100,0,300:256x256' "
      "--kgrouped-shapes '2x128:256x256;0,256:128x256' --config 'heuristic;block=128x64,multicast=A' --sweep "
      "--split-sweep --floor --clean-flush --scales both --check 16 --repeats 3 --warmup 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::set<std::string> cases, layouts, origins;
  int ours = 0;
  for (const nlohmann::json& j : r.lines) {
    const std::string name = j.at("case").get<std::string>();
    cases.insert(name);
    if (name.rfind("ours_", 0) != 0) continue;
    ++ours;
    SCOPED_TRACE(j.dump());
    EXPECT_FALSE(j.contains("error"));
    ASSERT_TRUE(j.contains("check"));
    EXPECT_EQ(j.at("check").get<std::string>().rfind("exact ", 0), 0u);
    EXPECT_GT(j.at("tflops").get<double>(), 0.0);
    layouts.insert(j.at("scales").get<std::string>());
    origins.insert(j.at("origin").get<std::string>());
  }
  EXPECT_GT(ours, 40);
  for (const char* c : {"bf16", "fp8_1x128_128x128", "ours_fp8_1x128_128x128", "ours_fp8_1x128_1x128_f32_acc",
                        "ours_fp8_grouped_1x128_128x128", "ours_fp8_kgrouped_1x128_1x128_f32_acc", "floor_read_b",
                        "floor_read_a_b"})
    EXPECT_EQ(cases.count(c), 1u) << c;
  EXPECT_EQ(layouts, (std::set<std::string>{"native", "row-major"}));
  EXPECT_EQ(origins, (std::set<std::string>{"heuristic", "config", "sweep", "split-sweep"}));
}

TEST(BenchGemmCli, AConfigurationTheFamilyDoesNotBuildFailsTheCommand) {
  const BenchRun r = run_bench("--shapes 256x256x512 --family dense --no-baselines --config 'block=128x48' "
                               "--repeats 2 --warmup 1");
  EXPECT_EQ(r.exit_code, 1);
  ASSERT_EQ(r.lines.size(), 1u);
  EXPECT_TRUE(r.lines[0].contains("error")) << r.lines[0].dump();
  EXPECT_NE(r.err.find("1 configuration(s) of ours failed"), std::string::npos) << r.err;
}

}  // namespace
