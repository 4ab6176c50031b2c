// Text generation: plain, cached and MTP-speculative decoding (see generation.h).
#include "train/generation.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "common/error.h"
#include "model/model.h"
#include "ops/elementwise.h"

namespace fp8train::train {

std::vector<double> sampling_distribution(const float* logits, int64_t vocab, const SamplingOptions& o) {
  FP8T_CHECK(vocab > 0, "sampling needs a non-empty vocabulary");
  std::vector<size_t> order;
  order.reserve(static_cast<size_t>(vocab));
  // Specials other than EOS are never sampled (they carry no text).
  for (size_t t = 0; t < static_cast<size_t>(vocab); ++t)
    if (o.tokenizer ? o.tokenizer->samplable(static_cast<Token>(t)) : t < 256 || t == kEos) order.push_back(t);
  FP8T_CHECK(!order.empty(), "sampling: the vocabulary has no samplable token");
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return logits[a] > logits[b]; });
  std::vector<double> p(static_cast<size_t>(vocab), 0.0);
  if (o.temperature <= 0.0) {
    p[order.front()] = 1.0;
    return p;
  }
  if (o.top_k > 0 && static_cast<size_t>(o.top_k) < order.size()) order.resize(static_cast<size_t>(o.top_k));
  double sum = 0.0;
  for (size_t t : order) sum += p[t] = std::exp((logits[t] - logits[order.front()]) / o.temperature);
  for (size_t t : order) p[t] /= sum;
  return p;
}

Token sample_from(const std::vector<double>& p, Rng& rng) {
  double u = rng.uniform01();
  size_t last = 0;
  for (size_t t = 0; t < p.size(); ++t) {
    if (p[t] <= 0.0) continue;
    if (u < p[t]) return static_cast<Token>(t);
    u -= p[t];
    last = t;
  }
  return static_cast<Token>(last);  // u rounded past the total: the last possible token
}

double acceptance_probability(const std::vector<double>& p, const std::vector<double>& q, Token d) {
  FP8T_CHECK(p.size() == q.size() && d < p.size(), "speculative rule: distributions of {} and {} tokens, draft {}",
             p.size(), q.size(), d);
  FP8T_CHECK(q[d] > 0.0, "speculative rule: draft {} has probability 0 under the draft distribution", d);
  return std::min(1.0, p[d] / q[d]);
}

std::vector<double> residual_distribution(const std::vector<double>& p, const std::vector<double>& q) {
  std::vector<double> r(p.size());
  double sum = 0.0;
  for (size_t t = 0; t < p.size(); ++t) sum += r[t] = std::max(0.0, p[t] - q[t]);
  if (sum <= 0.0) return p;  // p = q: nothing is ever rejected
  for (double& x : r) x /= sum;
  return r;
}

Token verify_draft(const std::vector<double>& p, const std::vector<double>& q, Token d, Rng& rng, bool* accepted) {
  const double a = acceptance_probability(p, q, d);
  // a = 1 (always so when greedy and the draft is the greedy token) accepts without drawing
  *accepted = a >= 1.0 || rng.uniform01() < a;
  return *accepted ? d : sample_from(residual_distribution(p, q), rng);
}

namespace {

Tensor token_tensor(const std::vector<Token>& all, size_t begin, size_t end, Device dev) {
  std::vector<int32_t> ids(all.begin() + static_cast<std::ptrdiff_t>(begin),
                           all.begin() + static_cast<std::ptrdiff_t>(end));
  return Tensor::from_vector(ids, {static_cast<int64_t>(ids.size())}, MemCategory::Workspace, dev);
}

// Appends t to the output unless generation is over; returns false when it is (EOS, or enough tokens).
struct Output {
  std::vector<Token>& all;
  std::vector<Token> produced;
  const std::function<void(Token)>& emit;
  int64_t limit;
  Token eos;
  bool done = false;
  void push(Token t) {
    if (done) return;
    if (t == eos) {
      done = true;
      return;
    }
    all.push_back(t);
    produced.push_back(t);
    if (emit) emit(t);
    if (static_cast<int64_t>(produced.size()) >= limit) done = true;
  }
};

}  // namespace

std::vector<Token> generate(model::DeepSeekV3Model& model, const std::vector<Token>& prompt, const GenerateOptions& o,
                            const std::function<void(Token)>& emit, GenerateStats* stats) {
  FP8T_CHECK(!prompt.empty(), "generate: the prompt must hold at least one token");
  FP8T_CHECK(o.window >= 2, "generate: the context window must be at least 2 tokens, got {}", o.window);
  FP8T_CHECK(o.max_new_tokens >= 0, "generate: max_new_tokens must be non-negative, got {}", o.max_new_tokens);
  const int64_t vocab = model.config().vocab_size, d = model.config().hidden_size;
  for (Token t : prompt)
    FP8T_CHECK(t < static_cast<Token>(vocab), "generate: prompt token {} is outside the vocabulary of {}", t, vocab);
  const int64_t depth = o.mode == DecodeMode::Speculative ? model.mtp_depth() : 0;
  FP8T_CHECK(o.mode != DecodeMode::Speculative || depth > 0,
             "speculative decoding drafts with the MTP modules, and this model has none (model.mtp_depth = 0)");
  const Device dev = model.parameters().trainable().front()->value.device();
  const ExecCtx exec = ExecCtx::on(dev);
  const auto t0 = std::chrono::steady_clock::now();
  Rng rng(o.seed);
  GenerateStats st;
  std::vector<Token> all = prompt;
  Output out{all, {}, emit, o.max_new_tokens, o.sampling.tokenizer ? o.sampling.tokenizer->eos_id() : kEos};
  if (o.max_new_tokens == 0) out.done = true;

  const int64_t window = o.window;
  size_t start = 0;        // the visible context is all[start..]
  auto fit_window = [&] {  // true when the visible context restarted
    if (static_cast<int64_t>(all.size() - start) <= window) return false;
    start = all.size() - static_cast<size_t>(std::max<int64_t>(1, window / 2));
    return true;
  };
  auto dist = [&](const std::vector<float>& logits, int64_t row) {
    return sampling_distribution(logits.data() + row * vocab, vocab, o.sampling);
  };

  if (o.mode == DecodeMode::Recompute) {
    while (!out.done) {
      fit_window();
      const std::vector<float> logits =
          model.last_logits(token_tensor(all, start, all.size(), dev), 1).to_vector<float>();
      ++st.main_passes;
      out.push(sample_from(dist(logits, 0), rng));
    }
  } else {
    model::DeepSeekV3Model::DecodeCache cache = model.new_decode_cache(window);
    int64_t cached = 0;  // main-model cache rows valid: visible positions [0, cached)
    // Speculative: h^k rows per depth (h^0 the main model's last block output) and the MTP caches' valid rows.
    std::vector<Tensor> hist;
    std::vector<int64_t> mtp_valid(static_cast<size_t>(depth), 0);
    for (int64_t k = 0; k < depth; ++k)
      hist.push_back(Tensor::empty({window, d}, model.compute_dtype(), MemCategory::ActivationCache, dev));
    // Runs the main model on visible positions [from, to) (tokens all[start+from..start+to)); returns the logits.
    auto run_main = [&](int64_t from, int64_t to) {
      const auto start_pass = std::chrono::steady_clock::now();
      Tensor hidden;
      const std::vector<float> logits =
          model
              .decode(token_tensor(all, start + static_cast<size_t>(from), start + static_cast<size_t>(to), dev), from,
                      cache, depth > 0 ? &hidden : nullptr)
              .to_vector<float>();
      if (depth > 0) ops::copy(exec, hidden, hist[0].rows(from, to));
      ++st.main_passes;
      cached = to;
      st.main_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_pass).count();
      return logits;
    };
    while (!out.done) {
      if (fit_window()) {
        cached = 0;
        std::fill(mtp_valid.begin(), mtp_valid.end(), 0);
      }
      const int64_t c = static_cast<int64_t>(all.size() - start);  // visible tokens; the last is not yet decoded
      // drafts that keep every verified position inside the window (so the windows match the plain path's)
      const int64_t drafts = std::min<int64_t>(depth, window - c);
      if (drafts <= 0 || c < 2) {
        const int64_t rows = c - cached;
        const std::vector<float> logits = run_main(cached, c);
        out.push(sample_from(dist(logits, rows - 1), rng));
        continue;
      }
      // bring the main model up to the token before the pending one: h^0 at positions [0, c−1)
      if (cached < c - 1) run_main(cached, c - 1);
      // draft: module k (1-based) at rows [mtp_valid, P], P = c−2, reads h^{k−1} and the tokens k ahead
      const int64_t P = c - 2;
      std::vector<Token> draft;
      std::vector<std::vector<double>> q;
      auto token_at = [&](int64_t pos) {  // visible position pos: committed, or a draft beyond the pending token
        return pos <= c - 1 ? all[start + static_cast<size_t>(pos)] : draft[static_cast<size_t>(pos - c)];
      };
      const auto start_draft = std::chrono::steady_clock::now();
      for (int64_t k = 1; k <= drafts; ++k) {
        const int64_t from = std::min(mtp_valid[static_cast<size_t>(k - 1)], P);
        std::vector<int32_t> ids;
        for (int64_t j = from; j <= P; ++j) ids.push_back(static_cast<int32_t>(token_at(j + k)));
        Tensor hidden;
        const std::vector<float> logits =
            model
                .mtp_decode(k - 1, hist[static_cast<size_t>(k - 1)].rows(from, P + 1),
                            Tensor::from_vector(ids, {static_cast<int64_t>(ids.size())}, MemCategory::Workspace, dev),
                            from, cache, k < depth ? &hidden : nullptr)
                .to_vector<float>();
        if (k < depth) ops::copy(exec, hidden, hist[static_cast<size_t>(k)].rows(from, P + 1));
        // rows whose inputs are all committed stay valid: token j+k committed ⇔ j <= c−1−k
        mtp_valid[static_cast<size_t>(k - 1)] = std::max<int64_t>(0, c - k);
        q.push_back(dist(logits, P - from));
        draft.push_back(sample_from(q.back(), rng));
        st.drafted++;
      }
      st.draft_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_draft).count();
      // the rows of modules deeper than this step's drafts read drafts no longer: leave them to be recomputed
      for (int64_t k = drafts + 1; k <= depth; ++k)
        mtp_valid[static_cast<size_t>(k - 1)] =
            std::min(mtp_valid[static_cast<size_t>(k - 1)], std::max<int64_t>(0, c - k));
      // verify: one main pass over [pending, d_1..d_n] at positions c−1..c−1+n
      const size_t committed = all.size();
      all.insert(all.end(), draft.begin(), draft.end());  // run_main reads its tokens from `all`
      const std::vector<float> logits = run_main(c - 1, c + drafts);
      all.resize(committed);
      int64_t accepted = 0;
      Token next = 0;
      bool rejected = false;
      for (int64_t i = 0; i < drafts; ++i) {
        bool ok = false;
        next = verify_draft(dist(logits, i), q[static_cast<size_t>(i)], draft[static_cast<size_t>(i)], rng, &ok);
        if (!ok) {
          rejected = true;
          break;
        }
        ++accepted;
      }
      if (!rejected) next = sample_from(dist(logits, drafts), rng);  // every draft accepted: one more for free
      st.accepted += accepted;
      cached = c + accepted;  // pending and the accepted drafts are decoded; rejected rows get overwritten
      for (int64_t i = 0; i < accepted; ++i) out.push(draft[static_cast<size_t>(i)]);
      out.push(next);
    }
  }
  st.new_tokens = static_cast<int64_t>(out.produced.size());
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (stats) *stats = st;
  return out.produced;
}

}  // namespace fp8train::train
