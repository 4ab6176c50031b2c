// The study's findings as assertions, on small runs of the experiments (a few samples each): where the
// physics is unambiguous the numbers must show it.
//   - no promotion: the accumulator's own error grows with K (and N_C = 128 holds it flat);
//   - correlation lowers the no-promotion ceiling, and promotion restores the SNR;
//   - fine-grained scaling beats per-tensor scaling under outlier channels (INT8 at 100×, E4M3 at 10^5×);
//   - underflow without scaling; E5M2 below E4M3 on Gaussian data; the published flaws cost what they should.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "lab/report_parts.h"
#include "lab/snr_study.h"

using namespace fp8train;
using lab::report::median_snr;
using lab::report::same;

namespace {

lab::SnrStudyConfig small(int samples) {
  lab::SnrStudyConfig c = lab::SnrStudyConfig::quick_preset();
  c.samples = samples;
  return c;
}

}  // namespace

TEST(SnrPhysics, NoPromotionErrorGrowsWithLength) {
  const auto rows = lab::run_length_experiment(small(3));
  auto acc_only = [&](int64_t k, int nc) {
    return median_snr(
        rows, 1,
        [&](const lab::SnrRow& r) {
          return r.length == k && r.scaling == "1x128" && same(r.sigma, 1.0) && r.accumulation == "hopper" &&
                 r.promote_interval == nc;
        },
        true);
  };
  double previous = INFINITY;
  for (int64_t k : lab::study_lengths()) {
    const double v = acc_only(k, 0);
    EXPECT_LT(v, previous - 3.0) << "no-promotion accumulation SNR must fall with K (K = " << k << ")";
    previous = v;
  }
  EXPECT_GT(acc_only(128, 0) - acc_only(16384, 0), 20.0);
  // Promotion every 128 keeps the accumulator's error flat (within 5 dB) and far below the no-promotion one.
  EXPECT_LT(std::fabs(acc_only(128, 128) - acc_only(16384, 128)), 5.0);
  EXPECT_GT(acc_only(16384, 128) - acc_only(16384, 0), 20.0);
  // Underflow without scaling: σ = 1e-3 E4M3 loses nearly everything; scaling restores ~29 dB.
  auto total = [&](const std::string& sc, double sigma) {
    return median_snr(rows, 1, [&](const lab::SnrRow& r) {
      return r.length == 4096 && r.scaling == sc && same(r.sigma, sigma) && r.accumulation == "fp32";
    });
  };
  EXPECT_LT(total("none", 1e-3), 10.0);
  EXPECT_GT(total("1x128", 1e-3), 20.0);
  EXPECT_GT(total("1x128", 1e-3) - total("none", 1e-3), 15.0);
}

TEST(SnrPhysics, CorrelationLowersTheCeilingAndPromotionRestoresIt) {
  const auto rows = lab::run_correlation_experiment(small(3));
  auto med = [&](double rho, const std::string& acc, int nc) {
    return median_snr(rows, 2, [&](const lab::SnrRow& r) {
      return same(r.rho, rho) && r.scaling == "1x128" && r.accumulation == acc && r.promote_interval == nc;
    });
  };
  // The no-promotion SNR falls as the vectors get more correlated ...
  EXPECT_GT(med(0.5, "hopper", 0), med(0.9, "hopper", 0));
  EXPECT_GT(med(0.9, "hopper", 0), med(0.99, "hopper", 0) - 0.5);
  // ... and promotion every 128 restores it to within a few dB of FP32.
  EXPECT_GT(med(0.99, "hopper", 128) - med(0.99, "hopper", 0), 20.0);
  EXPECT_LT(med(0.99, "fp32", -1) - med(0.99, "hopper", 128), 6.0);
  // The measured correlation of each sample is close to its target.
  for (const auto& r : rows) ASSERT_NEAR(r.measured_rho, r.rho, 0.05);
}

TEST(SnrPhysics, PromotionIntervalOrdersTheCorrelatedSnr) {
  const auto rows = lab::run_promotion_experiment(small(2));
  auto med = [&](int64_t k, int nc) {
    return median_snr(rows, 3, [&](const lab::SnrRow& r) {
      return r.length == k && same(r.rho, 0.9) && r.accumulation == "hopper" && r.promote_interval == nc;
    });
  };
  for (int64_t k : {4096, 16384}) {
    EXPECT_GT(med(k, 128), med(k, 1024) + 6.0) << k;
    EXPECT_GT(med(k, 1024), med(k, 0) + 6.0) << k;
  }
  EXPECT_GT(med(4096, 0), med(16384, 0) + 6.0);  // longer chains truncate more
}

TEST(SnrPhysics, FineGrainedScalingBeatsPerTensorUnderOutliers) {
  const auto rows = lab::run_outlier_experiment(small(2));
  auto med = [&](const std::string& f, const std::string& sc, double factor) {
    return median_snr(rows, 4, [&](const lab::SnrRow& r) {
      return r.data == "ordinary-channels" && r.format == f && r.scaling == sc && same(r.outlier_factor, factor);
    });
  };
  // INT8 has no exponent: 100x outliers already wreck a per-tensor scale.
  EXPECT_GT(med("int8", "1x128", 100), med("int8", "tensor", 100) + 10.0);
  EXPECT_GT(med("int8", "128x128", 100), med("int8", "tensor", 100) + 4.0);
  // E4M3 absorbs 100x (within 1.5 dB of no outliers) but not 10^5x.
  EXPECT_LT(std::fabs(med("e4m3", "tensor", 100) - med("e4m3", "tensor", 1)), 1.5);
  EXPECT_GT(med("e4m3", "1x128", 1e5), med("e4m3", "tensor", 1e5) + 8.0);
  EXPECT_GT(med("e4m3", "128x128", 1e5), med("e4m3", "tensor", 1e5) + 4.0);
}

TEST(SnrPhysics, FormatsAndPublishedFlaws) {
  const auto rows = lab::run_format_experiment(small(4));
  auto med = [&](const std::string& d, const std::string& f, const std::string& sc, const std::string& rd) {
    return median_snr(rows, 5, [&](const lab::SnrRow& r) {
      return r.data == d && r.format == f && r.scaling == sc && r.rounding == rd;
    });
  };
  EXPECT_GT(med("gaussian", "e4m3", "1x128", "rne"), med("gaussian", "e5m2", "1x128", "rne") + 3.0);
  EXPECT_GT(med("gaussian", "int8", "1x128", "rne"), med("gaussian", "e4m3", "1x128", "rne") + 5.0);
  EXPECT_GT(med("gaussian", "int8", "1x128", "rne"), med("gaussian", "int8", "1x128", "stochastic"));

  const auto checks = lab::run_method_checks(small(4));
  auto m7 = [&](const std::string& v, int64_t k, double rho, bool acc) {
    return median_snr(
        checks, 7, [&](const lab::SnrRow& r) { return r.recipe == v && r.length == k && same(r.rho, rho); }, acc);
  };
  // Truncated INT8 is clearly worse than rounded; an FP8 running sum is far worse than the real accumulator.
  EXPECT_GT(m7("INT8 rounded to nearest even", 4096, 0.0, false), m7("INT8 truncated toward zero", 4096, 0.0, false) + 4.0);
  EXPECT_GT(m7("Hopper FP22, no promotion", 4096, 0.0, true), m7("FP8 running sum, no promotion", 4096, 0.0, true) + 30.0);
  // The IEEE-style 240 range barely matters once values are scaled (within 1 dB).
  EXPECT_LT(std::fabs(m7("OCP E4M3 (max 448, RNE)", 4096, 0.0, false) -
                      m7("IEEE-style E4M3 (max 240, ties away)", 4096, 0.0, false)),
            1.0);
}

TEST(SnrPhysics, GemmRecipesRankAsExpected) {
  lab::SnrStudyConfig c = small(1);
  c.gemm_m = 256;
  c.gemm_n = 256;
  c.gemm_k = 512;
  c.gemm_blocks = 2;
  c.gemm_block_m = 16;
  const auto rows = lab::run_gemm_experiment(c);
  ASSERT_EQ(rows.size(), 2u * 7u * 2u);  // 2 GEMMs x 7 recipes x 2 sub-blocks
  auto med = [&](const std::string& g, const std::string& prefix) {
    return median_snr(rows, 6, [&](const lab::SnrRow& r) { return r.data == g && r.recipe.rfind(prefix, 0) == 0; });
  };
  for (const std::string g : {"fprop", "dgrad"}) {
    EXPECT_GT(med(g, "BF16"), med(g, "DeepSeek-V3:") + 15.0) << g;
    EXPECT_GT(med(g, "DeepSeek-V3:"), med(g, "per-tensor E5M2") + 3.0) << g;
    EXPECT_GT(med(g, "INT8"), med(g, "per-tensor E5M2") + 3.0) << g;
  }
  for (const auto& r : rows) {
    EXPECT_GE(r.calc_diff, 0.0);
    EXPECT_LT(r.calc_diff, 0.01) << r.recipe;
    EXPECT_GT(r.accum_snr_db, r.snr_db) << r.recipe;  // the accumulator's own error is the smaller part
  }
}
