// Text generation from a DeepSeekV3Model, three ways that give the same tokens (up to FP32 rounding in the logits):
//   Recompute    every token runs the whole visible context through the model (the reference)
//   Cache        incremental decoding with MLA's latent cache (model/mla.h): each token runs through the model once
//   Speculative  the cache, plus the MTP modules as draft heads: module k drafts the token k+1 ahead from the main
//                model's hidden state and the tokens before it; one main pass over [pending token, drafts] verifies
//                them all (the greedy token must match; sampled: the accept/resample rule below), and always yields
//                one more token from the main model, so a pass emits 1..D+1 tokens.
// Context window: the model sees at most `window` tokens (its training seq_len, positions from 0). When the next
// token would not fit, the visible context restarts from the last window/2 tokens (the cache is refilled from
// them) — the same rule in every mode, so their outputs stay comparable everywhere.
// Speculative sampling (Leviathan et al. 2023; Chen et al. 2023): a draft d ~ q is accepted with probability
// min(1, p(d)/q(d)); a rejected draft is replaced by a token drawn from norm(max(p − q, 0)). The emitted token is
// then distributed exactly as p, the main model's sampling distribution (temperature, top-k) — whatever q is.
// With temperature 0 both are one-hot, so a draft is accepted iff it is the main model's greedy token.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "train/rng.h"
#include "train/tokenizer.h"

namespace fp8train::model {
class DeepSeekV3Model;
}

namespace fp8train::train {

struct SamplingOptions {
  double temperature = 0.8;  // 0: greedy
  int64_t top_k = 40;        // 0: every token
  // Which ids may be drawn and which one is EOS (Tokenizer::samplable, eos_id); null: the byte tokenizer's.
  const Tokenizer* tokenizer = nullptr;
};

// The distribution the next token is drawn from, over the whole vocabulary: ids the tokenizer does not sample
// (specials other than EOS) get 0;
// temperature 0 puts 1 on the most likely token (the lowest id among ties); top_k > 0 keeps the k most likely
// (ties to the lower id); the rest softmax(logits / temperature).
std::vector<double> sampling_distribution(const float* logits, int64_t vocab, const SamplingOptions& options);
// A token drawn from p (inverse CDF in id order, one uniform).
Token sample_from(const std::vector<double>& p, Rng& rng);
// The speculative rule's two pieces: the acceptance probability of draft d, and the distribution a rejected
// draft is replaced from, norm(max(p − q, 0)) (p itself where p ≤ q everywhere, i.e. p = q).
double acceptance_probability(const std::vector<double>& p, const std::vector<double>& q, Token d);
std::vector<double> residual_distribution(const std::vector<double>& p, const std::vector<double>& q);
// One speculative verification: accept d (drawn from q) or return a replacement drawn from the residual.
// Returns d when accepted; *accepted says which.
Token verify_draft(const std::vector<double>& p, const std::vector<double>& q, Token d, Rng& rng, bool* accepted);

enum class DecodeMode { Recompute, Cache, Speculative };

struct GenerateOptions {
  SamplingOptions sampling;
  int64_t max_new_tokens = 200;
  uint64_t seed = 1;
  DecodeMode mode = DecodeMode::Cache;
  int64_t window = 0;  // the most tokens the model sees (its training seq_len); >= 2
};

struct GenerateStats {
  int64_t new_tokens = 0;
  int64_t main_passes = 0;            // forward passes of the main model (prefills included)
  int64_t drafted = 0, accepted = 0;  // speculative: drafts proposed and accepted
  double seconds = 0;
  double main_seconds = 0, draft_seconds = 0;  // of which in main-model passes, in MTP draft passes
  double acceptance_rate() const { return drafted > 0 ? static_cast<double>(accepted) / drafted : 0.0; }
  double tokens_per_second() const { return seconds > 0 ? static_cast<double>(new_tokens) / seconds : 0.0; }
};

// Continues `prompt` (non-empty) by up to max_new_tokens tokens, stopping after EOS is drawn (EOS is not
// returned); `emit` (may be empty) sees each token as it is decided. The model must be on the device its
// parameters are on; Speculative needs MTP modules.
std::vector<Token> generate(model::DeepSeekV3Model& model, const std::vector<Token>& prompt,
                            const GenerateOptions& options, const std::function<void(Token)>& emit = {},
                            GenerateStats* stats = nullptr);

}  // namespace fp8train::train
