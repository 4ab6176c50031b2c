// Incremental decoding with MLA's latent cache (model/mla.h, DeepSeekV3Model::decode) against the full forward:
// the logits at every position equal last_logits of the prefix within FP32 rounding, however the tokens are split
// into decode calls (a prefill, single tokens, a chunk), and re-decoding a position overwrites its cache row
// (what speculative decoding relies on to drop rejected drafts). Also the cache's size per token.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "model/model.h"

namespace fp8train::model {
namespace {

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int32_t> d(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = d(gen);
  return t;
}

Tensor ids(const std::vector<int32_t>& t, size_t begin, size_t end) {
  return Tensor::from_vector(std::vector<int32_t>(t.begin() + static_cast<std::ptrdiff_t>(begin),
                                                  t.begin() + static_cast<std::ptrdiff_t>(end)),
                             {static_cast<int64_t>(end - begin)});
}

// max |a − b| over a row of logits, relative to the row's largest magnitude
double row_error(const float* a, const float* b, int64_t n) {
  double err = 0, mag = 0;
  for (int64_t i = 0; i < n; ++i) {
    err = std::max(err, std::abs(static_cast<double>(a[i]) - b[i]));
    mag = std::max(mag, std::abs(static_cast<double>(b[i])));
  }
  return err / std::max(mag, 1e-30);
}

// FP32 throughout: the absorbed path sums the same products in another order (over kv_lora_rank latent dims
// instead of d_nope per head), so agreement is to FP32 rounding, not bit for bit.
constexpr double kFp32Tolerance = 2e-5;

TEST(Decode, LatentCacheLogitsEqualTheFullForwardAtEveryPosition) {
  ModelConfig c = tiny_test_config();
  c.init_std = 0.05;  // logits far from uniform, so the comparison means something
  DeepSeekV3Model m(c, {DType::F32, 7, "fp32"});
  const int64_t n = 23, vocab = c.vocab_size;
  const std::vector<int32_t> t = random_tokens(n, vocab, 3);
  auto cache = m.new_decode_cache(32);
  // split: a prefill of 9, five single tokens, a chunk of 4, single tokens to the end
  std::vector<std::pair<int64_t, int64_t>> calls = {{0, 9}};
  for (int64_t p = 9; p < 14; ++p) calls.emplace_back(p, p + 1);
  calls.emplace_back(14, 18);
  for (int64_t p = 18; p < n; ++p) calls.emplace_back(p, p + 1);
  double worst = 0;
  for (const auto& [from, to] : calls) {
    const std::vector<float> got = m.decode(ids(t, from, to), from, cache).to_vector<float>();
    ASSERT_EQ(static_cast<int64_t>(got.size()), (to - from) * vocab);
    for (int64_t p = from; p < to; ++p) {
      const std::vector<float> want = m.last_logits(ids(t, 0, p + 1), 1).to_vector<float>();
      const double e = row_error(got.data() + (p - from) * vocab, want.data(), vocab);
      worst = std::max(worst, e);
      EXPECT_LT(e, kFp32Tolerance) << "position " << p;
    }
  }
  EXPECT_GT(worst, 0.0) << "suspicious: the absorbed path matched bit for bit";
}

TEST(Decode, RedecodingAPositionReplacesItsCacheRow) {
  const ModelConfig c = tiny_test_config();
  DeepSeekV3Model m(c, {DType::F32, 11, "fp32"});
  const std::vector<int32_t> t = random_tokens(12, c.vocab_size, 5);
  std::vector<int32_t> wrong = t;
  for (size_t i = 8; i < 12; ++i) wrong[i] = (t[i] + 1) % static_cast<int32_t>(c.vocab_size);
  auto cache = m.new_decode_cache(16);
  m.decode(ids(t, 0, 8), 0, cache);
  m.decode(ids(wrong, 8, 12), 8, cache);                                                // drafts that get rejected
  const std::vector<float> got = m.decode(ids(t, 8, 12), 8, cache).to_vector<float>();  // decoded again
  const std::vector<float> want = m.last_logits(ids(t, 0, 12), 1).to_vector<float>();
  EXPECT_LT(row_error(got.data() + 3 * c.vocab_size, want.data(), c.vocab_size), kFp32Tolerance);
}

TEST(Decode, BadPositionsAndCachesAreRefused) {
  const ModelConfig c = tiny_test_config();
  DeepSeekV3Model m(c, {DType::F32, 1, "fp32"});
  auto cache = m.new_decode_cache(4);
  const std::vector<int32_t> t = random_tokens(5, c.vocab_size, 1);
  EXPECT_THROW(m.decode(ids(t, 0, 5), 0, cache), Error);  // 5 tokens, 4 rows
  EXPECT_THROW(m.decode(ids(t, 0, 2), 3, cache), Error);  // rows 3..4
  DeepSeekV3Model::DecodeCache empty;
  EXPECT_THROW(m.decode(ids(t, 0, 1), 0, empty), Error);
  EXPECT_THROW(m.new_decode_cache(0), Error);
}

// The MTP modules decoded with their own latent caches give the training forward's MTP losses: module k at
// position i reads h^{k−1}_i and Emb(t_{i+k}) and predicts t_{i+k+1} (L^k = mean cross-entropy).
TEST(Decode, MtpModulesDecodeAsInTheTrainingForward) {
  ModelConfig c = tiny_test_config();
  c.mtp_depth = 2;
  c.init_std = 0.05;
  DeepSeekV3Model m(c, {DType::F32, 9, "fp32"});
  const int64_t n = 16, vocab = c.vocab_size;
  const std::vector<int32_t> t = random_tokens(n + 1, vocab, 4);
  const Tensor inputs = ids(t, 0, static_cast<size_t>(n)), targets = ids(t, 1, static_cast<size_t>(n + 1));
  const LossBreakdown full = m.forward(inputs, targets, 1, /*include_mtp=*/true);
  ASSERT_EQ(full.mtp_per_depth.size(), 2u);
  auto cache = m.new_decode_cache(n);
  Tensor h;
  m.decode(inputs, 0, cache, &h);
  for (int64_t k = 1; k <= 2; ++k) {
    const int64_t rows = n - k;  // positions i with t_{i+k} inside the window
    Tensor next;
    const std::vector<float> logits =
        m.mtp_decode(k - 1, h.rows(0, rows), ids(t, static_cast<size_t>(k), static_cast<size_t>(n)), 0, cache, &next)
            .to_vector<float>();
    double loss = 0;
    for (int64_t i = 0; i < rows; ++i) {
      const float* l = logits.data() + i * vocab;
      double mx = l[0], sum = 0;
      for (int64_t v = 0; v < vocab; ++v) mx = std::max(mx, static_cast<double>(l[v]));
      for (int64_t v = 0; v < vocab; ++v) sum += std::exp(l[v] - mx);
      loss += mx + std::log(sum) - l[t[static_cast<size_t>(i + k + 1)]];
    }
    loss /= static_cast<double>(rows);
    EXPECT_NEAR(loss, full.mtp_per_depth[static_cast<size_t>(k - 1)], 1e-5 * loss) << "MTP module " << k;
    h = next;
  }
}

// Per token and layer MLA caches kv_lora_rank + d_rope values; MHA of the same head dims n_h·(d_qk + d_v).
TEST(Decode, CacheBytesPerToken) {
  const ModelConfig c = tiny_test_config();
  DeepSeekV3Model f32(c, {DType::F32, 1, "fp32"}), b16(c, {DType::F32, 1, "bf16"});
  EXPECT_EQ(f32.latent_cache_bytes_per_token(), c.n_layers * (c.kv_lora_rank + c.qk_rope_head_dim) * 4);
  EXPECT_EQ(b16.latent_cache_bytes_per_token(), c.n_layers * (c.kv_lora_rank + c.qk_rope_head_dim) * 2);
  EXPECT_EQ(b16.mha_cache_bytes_per_token(), c.n_layers * c.n_heads * (c.qk_head_dim() + c.v_head_dim) * 2);
  auto cache = b16.new_decode_cache(10);
  ASSERT_EQ(cache.layers.size(), static_cast<size_t>(c.n_layers));
  ASSERT_EQ(cache.mtp.size(), static_cast<size_t>(c.mtp_depth));
  EXPECT_EQ(static_cast<int64_t>(cache.layers[0].nbytes()), 10 * (c.kv_lora_rank + c.qk_rope_head_dim) * 2);
}

}  // namespace
}  // namespace fp8train::model
