// Generation (train/generation.h): the sampling distribution; the speculative accept/resample rule, whose emitted
// token is distributed exactly as the main model's p (computed exactly, and measured through the real sampler);
// greedy decoding gives the same tokens recomputing, with the latent cache and with MTP speculation; sampled
// speculative decoding on a tiny model draws its first two tokens from the main model's exact joint distribution.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "model/model.h"
#include "train/generation.h"

namespace fp8train::train {
namespace {

// A random distribution over n tokens with `zeros` of them (at most n − 1) impossible.
std::vector<double> random_distribution(size_t n, std::mt19937_64& gen, size_t zeros) {
  std::uniform_real_distribution<double> u(0.01, 1.0);
  std::vector<double> p(n);
  for (auto& x : p) x = u(gen);
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), gen);
  for (size_t z = 0; z < std::min(zeros, n - 1); ++z) p[order[z]] = 0;
  double sum = 0;
  for (double x : p) sum += x;
  for (auto& x : p) x /= sum;
  return p;
}

TEST(Generation, SamplingDistributionAppliesTemperatureTopKAndMasksSpecials) {
  std::vector<float> logits(259, -5.0f);
  logits[10] = 3.0f;
  logits[20] = 2.0f;
  logits[30] = 2.0f;
  logits[kBos] = 9.0f;  // a special: never sampled
  logits[kEos] = 1.0f;
  const std::vector<double> greedy = sampling_distribution(logits.data(), 259, {0.0, 40});
  EXPECT_EQ(greedy[10], 1.0);
  const std::vector<double> top3 = sampling_distribution(logits.data(), 259, {0.5, 3});
  EXPECT_EQ(top3[kBos], 0.0);
  EXPECT_NEAR(top3[10] + top3[20] + top3[30], 1.0, 1e-12);
  EXPECT_NEAR(top3[10] / top3[20], std::exp(2.0), 1e-9);  // exp((3 − 2) / 0.5)
  const std::vector<double> all = sampling_distribution(logits.data(), 259, {1.0, 0});
  EXPECT_GT(all[kEos], 0.0);
  EXPECT_EQ(all[kPad], 0.0);
}

// The emitted token's exact distribution under the rule: Σ_d q(d)·[a(d)·δ_d + (1 − a(d))·r], r the residual.
TEST(Generation, SpeculativeRuleEmitsExactlyTheTargetDistribution) {
  std::mt19937_64 gen(1);
  for (int trial = 0; trial < 200; ++trial) {
    const size_t n = 2 + gen() % 7;
    const std::vector<double> p = random_distribution(n, gen, static_cast<size_t>(trial % 3)),
                              q = random_distribution(n, gen, static_cast<size_t>(trial % 2));
    const std::vector<double> r = residual_distribution(p, q);
    std::vector<double> emitted(n, 0.0);
    for (size_t d = 0; d < n; ++d) {
      if (q[d] == 0) continue;
      const double a = acceptance_probability(p, q, static_cast<Token>(d));
      emitted[d] += q[d] * a;
      for (size_t x = 0; x < n; ++x) emitted[x] += q[d] * (1 - a) * r[x];
    }
    for (size_t x = 0; x < n; ++x) ASSERT_NEAR(emitted[x], p[x], 1e-12) << "trial " << trial << " token " << x;
  }
  // greedy: one-hot p and q — accepted iff the draft is p's token, and the replacement is p's token
  const std::vector<double> p{0, 1, 0}, q{0, 0, 1};
  Rng rng(1);
  bool ok = true;
  EXPECT_EQ(verify_draft(p, q, 2, rng, &ok), 1u);
  EXPECT_FALSE(ok);
  EXPECT_EQ(verify_draft(p, p, 1, rng, &ok), 1u);
  EXPECT_TRUE(ok);
}

// The sampler itself (draft from q, verify_draft): 200k draws against p by a chi-square test (fixed seeds, so the
// outcome is deterministic; the bound is the 0.999 quantile for 5 degrees of freedom).
TEST(Generation, SpeculativeSamplerMatchesTheTargetDistributionEmpirically) {
  const std::vector<double> p{0.05, 0.4, 0.1, 0.25, 0.0, 0.2}, q{0.3, 0.1, 0.3, 0.1, 0.15, 0.05};
  Rng rng(42);
  const int draws = 200000;
  std::vector<int> count(p.size(), 0);
  for (int i = 0; i < draws; ++i) {
    bool ok = false;
    ++count[verify_draft(p, q, sample_from(q, rng), rng, &ok)];
  }
  EXPECT_EQ(count[4], 0);
  double chi2 = 0;
  for (size_t x = 0; x < p.size(); ++x)
    if (p[x] > 0) chi2 += std::pow(count[x] - draws * p[x], 2) / (draws * p[x]);
  EXPECT_LT(chi2, 20.5);
}

model::ModelConfig tiny_config() {
  model::ModelConfig c = model::tiny_test_config();
  c.vocab_size = 259;  // the byte tokenizer's: prompts are text
  c.init_std = 0.05;
  return c;
}

TEST(Generation, GreedyTokensAreTheSameRecomputingCachedAndSpeculative) {
  const std::vector<Token> prompt{'T', 'h', 'e', ' '};
  GenerateOptions o;
  o.sampling.temperature = 0;
  o.max_new_tokens = 40;
  o.window = 12;  // 44 tokens: the context restarts several times
  for (int64_t depth : {1, 2}) {
    model::ModelConfig c = tiny_config();
    c.mtp_depth = depth;
    model::DeepSeekV3Model m(c, {DType::F32, 3, "fp32"});
    o.mode = DecodeMode::Recompute;
    const std::vector<Token> plain = generate(m, prompt, o);
    o.mode = DecodeMode::Cache;
    const std::vector<Token> cached = generate(m, prompt, o);
    o.mode = DecodeMode::Speculative;
    GenerateStats st;
    const std::vector<Token> spec = generate(m, prompt, o, {}, &st);
    ASSERT_EQ(plain.size(), 40u);
    EXPECT_EQ(cached, plain) << "MTP depth " << depth;
    EXPECT_EQ(spec, plain) << "MTP depth " << depth;
    EXPECT_GT(st.drafted, 0);
    EXPECT_LT(st.main_passes, 40 + 10) << "a pass per token at most, plus the refills after restarts";
  }
  // a model without MTP modules cannot draft
  model::ModelConfig no_mtp = tiny_config();
  no_mtp.mtp_depth = 0;
  model::DeepSeekV3Model plain_model(no_mtp, {DType::F32, 3, "fp32"});
  EXPECT_THROW(generate(plain_model, prompt, o), Error);
}

// The first two sampled tokens after a prompt (the first one verified against an MTP draft, the second the
// verify pass's own token or a verified draft) against their exact joint distribution p(t1)·p(t2 | t1) from the
// main model; top-k 3 keeps it to 9 outcomes. Fixed seeds: deterministic. Bound: chi-square 0.999 quantile, 8 dof.
TEST(Generation, SampledSpeculativeDecodingDrawsFromTheMainModel) {
  model::DeepSeekV3Model m(tiny_config(), {DType::F32, 5, "fp32"});
  const std::vector<int32_t> prompt{'a', 'b', 'c'};
  const SamplingOptions so{1.0, 3};
  const int64_t vocab = m.config().vocab_size;
  auto dist_after = [&](const std::vector<int32_t>& ctx) {
    const std::vector<float> l =
        m.last_logits(Tensor::from_vector(ctx, {static_cast<int64_t>(ctx.size())}), 1).to_vector<float>();
    return sampling_distribution(l.data(), vocab, so);
  };
  std::map<std::pair<Token, Token>, double> exact;
  const std::vector<double> p1 = dist_after(prompt);
  for (Token a = 0; a < vocab; ++a) {
    if (p1[a] == 0) continue;
    std::vector<int32_t> ctx = prompt;
    ctx.push_back(static_cast<int32_t>(a));
    const std::vector<double> p2 = dist_after(ctx);
    for (Token b = 0; b < vocab; ++b)
      if (p2[b] > 0) exact[{a, b}] = p1[a] * p2[b];
  }
  ASSERT_EQ(exact.size(), 9u);
  GenerateOptions o;
  o.sampling = so;
  o.max_new_tokens = 2;
  o.window = 16;
  o.mode = DecodeMode::Speculative;
  const int runs = 1200;
  std::map<std::pair<Token, Token>, int> seen;
  int64_t drafted = 0, accepted = 0;
  for (int s = 0; s < runs; ++s) {
    o.seed = static_cast<uint64_t>(s + 1);
    GenerateStats st;
    const std::vector<Token> t = generate(m, {'a', 'b', 'c'}, o, {}, &st);
    ASSERT_EQ(t.size(), 2u);
    ++seen[{t[0], t[1]}];
    drafted += st.drafted;
    accepted += st.accepted;
  }
  double chi2 = 0;
  for (const auto& [pair, pr] : exact) chi2 += std::pow(seen[pair] - runs * pr, 2) / (runs * pr);
  EXPECT_EQ(seen.size(), exact.size()) << "a pair outside the main model's support was emitted";
  EXPECT_LT(chi2, 26.1);
  EXPECT_GT(accepted, 0);
  EXPECT_LT(accepted, drafted) << "the test should see both accepted and rejected drafts";
}

}  // namespace
}  // namespace fp8train::train
