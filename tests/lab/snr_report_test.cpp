// results.csv and report.html of the SNR study: the CSV layout and quoting, the SNR the rows carry, the
// self-contained page (inline SVG, no script, every section), and the atomic writer.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include <fmt/format.h>
#include <string>
#include <vector>

#include "common/error.h"
#include "lab/snr_internal.h"
#include "lab/snr_report.h"
#include "lab/snr_study.h"

using namespace fp8train;

namespace {

std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

std::filesystem::path fresh_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("fp8train_lab_{}_{}", name, ::getpid());
  std::filesystem::remove_all(dir);
  return dir;
}

}  // namespace

TEST(SnrScore, SnrAndCalcDiffOfKnownOutputs) {
  // ref = (3, 4): Σref² = 25; test = (3, 4.5): Σerr² = 0.25 -> SNR = 10·log10(100) = 20 dB exactly.
  lab::SnrRow row;
  const std::vector<double> ref = {3.0, 4.0};
  const std::vector<float> test = {3.0f, 4.5f};
  const std::vector<double> exact_q = {3.0, 4.5};
  lab::detail::score(row, ref, test, &exact_q);
  EXPECT_NEAR(row.snr_db, 20.0, 1e-12);
  EXPECT_TRUE(std::isinf(row.accum_snr_db) && row.accum_snr_db > 0);  // the accumulator added nothing
  // calc_diff = 1 − 2Σxy/Σ(x²+y²) = 1 − 2·27/(25 + 29.25)
  EXPECT_NEAR(row.calc_diff, 1.0 - 54.0 / 54.25, 1e-12);
  // A relative error ε on every output gives SNR = −20·log10(ε).
  const std::vector<double> r2 = {1.0, -2.0, 5.0};
  const std::vector<float> t2 = {1.001f, -2.002f, 5.005f};
  lab::detail::score(row, r2, t2);
  EXPECT_NEAR(row.snr_db, 60.0, 1e-3);
}

TEST(SnrReport, CsvHeaderRowsAndQuoting) {
  lab::SnrRow r;
  r.experiment = 6;
  r.sample = 2;
  r.data = "fprop";
  r.length = 2048;
  r.format = "e4m3xe4m3";
  r.scaling = "1x128|128x128";
  r.rounding = "rne";
  r.accumulation = "hopper";
  r.promote_interval = 0;
  r.recipe = "a, \"quoted\" recipe";
  r.snr_db = 30.123456;
  r.accum_snr_db = INFINITY;
  r.calc_diff = 4.5e-4;
  const std::string csv = lab::results_csv({r});
  const std::string expect = fmt::format(
      "{}\n6,2,fprop,,,,,2048,e4m3xe4m3,1x128|128x128,rne,hopper,never,\"a, \"\"quoted\"\" recipe\",30.1235,inf,"
      "4.500000e-04\n",
      lab::kSnrCsvHeader);
  EXPECT_EQ(csv, expect);
  // Every header field is one column of every row.
  EXPECT_EQ(count(lab::kSnrCsvHeader, ","), 16u);
}

TEST(SnrReport, PageIsSelfContainedWithEverySection) {
  lab::SnrStudyConfig c = lab::SnrStudyConfig::quick_preset();
  c.samples = 2;
  std::vector<lab::SnrRow> rows = lab::run_correlation_experiment(c);
  const auto more = lab::run_format_experiment(c);
  rows.insert(rows.end(), more.begin(), more.end());
  const std::string html = lab::report_html(rows, c);
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_EQ(count(html, "<script"), 0u);
  EXPECT_EQ(count(html, "src=\"http"), 0u);
  EXPECT_NE(html.find("id=\"exp2\""), std::string::npos);
  EXPECT_NE(html.find("id=\"exp5\""), std::string::npos);
  EXPECT_EQ(html.find("id=\"exp1\""), std::string::npos);  // no rows of experiment 1: no section
  EXPECT_NE(html.find("id=\"methods\""), std::string::npos);
  EXPECT_NE(html.find("id=\"disagreements\""), std::string::npos);
  EXPECT_EQ(count(html, "<svg xmlns"), 3u);       // two figures of experiment 2, one of experiment 5
  EXPECT_EQ(count(html, "<b>Reading.</b>"), 3u);  // one reading per figure
  EXPECT_EQ(count(html, "<figure"), count(html, "</figure>"));
}

TEST(SnrReport, WritesBothFilesAtomicallyAndRefusesAFileAsDirectory) {
  const auto dir = fresh_dir("write");
  lab::SnrRow r;
  r.experiment = 1;
  r.data = "gaussian";
  lab::write_snr_outputs((dir / "nested").string(), {r}, lab::SnrStudyConfig::quick_preset());
  EXPECT_TRUE(std::filesystem::is_regular_file(dir / "nested" / "results.csv"));
  EXPECT_TRUE(std::filesystem::is_regular_file(dir / "nested" / "report.html"));
  for (const auto& e : std::filesystem::directory_iterator(dir / "nested"))
    EXPECT_NE(e.path().extension(), ".tmp") << "temporary file left behind: " << e.path();
  EXPECT_EQ(slurp(dir / "nested" / "results.csv"), lab::results_csv({r}));
  std::ofstream(dir / "plain_file") << "x";
  EXPECT_THROW(lab::write_snr_outputs((dir / "plain_file").string(), {r}, lab::SnrStudyConfig::quick_preset()), Error);
  std::filesystem::remove_all(dir);
}

TEST(SnrStudy, ConfigValidationNamesTheProblem) {
  lab::SnrStudyConfig c;
  c.samples = 0;
  try {
    c.validate();
    FAIL() << "samples = 0 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--samples"), std::string::npos) << e.what();
  }
  c = lab::SnrStudyConfig{};
  c.gemm_block_n = 100;
  EXPECT_THROW(c.validate(), Error);
  EXPECT_THROW(lab::run_snr_study(lab::SnrStudyConfig::quick_preset(), {8}), Error);
}
