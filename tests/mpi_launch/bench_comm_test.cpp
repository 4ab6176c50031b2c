// `mpiexec -np 2 fp8train bench comm` on CPU ranks (ctest label `mpi`): every collective reports the size it moved,
// a time, and a bus bandwidth that is the algorithm bandwidth times nccl-tests' bus factor; the EP dispatch rows
// carry the bytes an FP8 (codes + 1×128 scales) and a BF16 dispatch move at the given shape; one rank alone runs
// too (bus factor 0); an unknown collective is one clear error.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "../common/cli_runner.h"

namespace fs = std::filesystem;

namespace {

struct CommRun {
  int exit_code = -1;
  std::vector<nlohmann::json> rows;
  std::string err;
};

CommRun bench_comm(int ranks, const std::string& args) {
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 0);
  const fs::path dir = fs::temp_directory_path() / fmt::format("fp8train_bench_comm_{}", getpid());
  fs::create_directories(dir);
  const fs::path out = dir / "out.jsonl", err = dir / "err.txt";
  const std::string launcher =
      ranks == 0 ? std::string() : fmt::format("'{}' -n {} --oversubscribe ", FP8TRAIN_MPIEXEC, ranks);
  const std::string cmd = fmt::format("{}'{}' bench comm --device cpu {} > '{}' 2> '{}'", launcher, FP8TRAIN_CLI, args,
                                      out.string(), err.string());
  const int status = std::system(cmd.c_str());
  CommRun r;
  r.exit_code = status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = fp8train::test::slurp(err);
  if (r.exit_code == 0) r.rows = fp8train::test::jsonl(out);
  fs::remove_all(dir);
  return r;
}

TEST(BenchComm, TwoRanksReportEveryCollectiveAndTheEpDispatch) {
  const CommRun r = bench_comm(2, "--sizes 4096 --repeats 2 --warmup 1 --tokens 64 --hidden 256 --top-k 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::map<std::string, nlohmann::json> by;
  for (const nlohmann::json& row : r.rows) {
    if (row.contains("collective")) by[row["collective"].get<std::string>()] = row;
    if (row.contains("ep_dispatch")) by["ep " + row["ep_dispatch"].get<std::string>()] = row;
    if (row.contains("bf16_over_fp8_bytes")) by["ratio"] = row;
  }
  for (const char* c : {"all_reduce", "reduce_scatter", "all_gather", "all_to_all"}) {
    SCOPED_TRACE(c);
    ASSERT_TRUE(by.count(c)) << r.err;
    const nlohmann::json& row = by[c];
    EXPECT_EQ(row["ranks"], 2);
    EXPECT_EQ(row["backend"], "mpi");
    EXPECT_EQ(row["bytes"], 4096);
    const double time = row["time_us"].get<double>(), algbw = row["algbw_GBps"].get<double>();
    EXPECT_GT(time, 0.0);
    EXPECT_NEAR(algbw, 4096 / (time * 1e-6) / 1e9, 1e-9 * algbw);
    const double factor = std::string(c) == "all_reduce" ? 1.0 : 0.5;  // 2(n-1)/n and (n-1)/n for n = 2
    EXPECT_NEAR(row["busbw_GBps"].get<double>(), algbw * factor, 1e-12 * algbw);
  }
  // 64 tokens x top-2 over 2 ranks: 64 rows to each rank; FP8 rows carry 256 codes + 2 scales, BF16 rows 512 bytes.
  ASSERT_TRUE(by.count("ep fp8") && by.count("ep fp8-2x") && by.count("ep bf16") && by.count("ratio")) << r.err;
  EXPECT_EQ(by["ep fp8"]["bytes_per_rank"], 64 * 2 * (256 + 4 * 2));
  EXPECT_EQ(by["ep fp8-2x"]["bytes_per_rank"], 64 * 2 * (256 + 4 * 2));  // the same bytes in two collectives
  EXPECT_EQ(by["ep bf16"]["bytes_per_rank"], 64 * 2 * 512);
  EXPECT_NEAR(by["ratio"]["bf16_over_fp8_bytes"].get<double>(), 512.0 / 264.0, 1e-12);
  EXPECT_GT(by["ratio"]["ep_dispatch_fp8_over_bf16_tokens_per_s"].get<double>(), 0.0);
}

TEST(BenchComm, OneRankRunsWithNoBusTraffic) {
  const CommRun r =
      bench_comm(0, "--sizes 1024 --repeats 1 --collectives all_reduce --tokens 16 --hidden 128 --top-k 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_FALSE(r.rows.empty());
  EXPECT_EQ(r.rows[0]["ranks"], 1);
  EXPECT_EQ(r.rows[0]["busbw_GBps"].get<double>(), 0.0);
}

TEST(BenchComm, AnUnknownCollectiveIsOneClearError) {
  const CommRun r = bench_comm(0, "--sizes 1024 --repeats 1 --collectives all_to_one");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("unknown collective 'all_to_one'"), std::string::npos) << r.err;
}

}  // namespace
