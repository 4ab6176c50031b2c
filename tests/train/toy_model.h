// A bigram language model implementing TrainableModel, small and exact enough to test the trainer's
// machinery (accumulation, skipping, checkpoints, resume, reports) in milliseconds:
//   logits[t] = W[input_t, :] + b                      W: [vocab, vocab], b: [vocab] (1-D: no weight decay)
//   loss = mean_t CE(logits[t], target_t)
// plus a fake 4-expert "router" (expert = input_t mod 4) whose per-expert bias, a non-trainable state buffer,
// moves by ±0.01 toward balance after every applied step, like DeepSeek-V3's bias update.
// nan_at_steps: forward_backward returns a NaN loss and NaN gradients while the step counter is in the set.
#pragma once
#include <array>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "train/trainable.h"

namespace fp8train::train::testing {

class BigramModel : public TrainableModel {
 public:
  explicit BigramModel(int64_t vocab, uint64_t seed = 1) : vocab_(vocab) {
    w_.assign(static_cast<size_t>(vocab * vocab), 0.0f);
    gw_.assign(w_.size(), 0.0f);
    b_.assign(static_cast<size_t>(vocab), 0.0f);
    gb_.assign(b_.size(), 0.0f);
    bias_.assign(4, 0.0f);
    uint64_t s = seed;
    for (float& x : w_) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      x = 0.02f * (static_cast<float>(s >> 40) / static_cast<float>(1 << 24) - 0.5f);
    }
  }

  optim::ParamList parameters() override {
    return {{"bigram.weight", w_.data(), gw_.data(), w_.size(), true},
            {"bigram.bias", b_.data(), gb_.data(), b_.size(), true}};
  }
  std::vector<NamedShape> parameter_shapes() override {
    return {{"bigram.weight", {vocab_, vocab_}}, {"bigram.bias", {vocab_}}};
  }
  std::vector<StateBuffer> state() override { return {{"router.bias", {4}, bias_.data(), bias_.size()}}; }
  int64_t vocab_size() const override { return vocab_; }

  MicroBatchResult forward_backward(const Token* inputs, const Token* targets, int64_t batch, int64_t seq_len,
                                    double grad_scale) override {
    MicroBatchResult r;
    const int64_t n = batch * seq_len;
    const bool poison = nan_at_steps.count(step_) > 0;
    std::vector<double> p(static_cast<size_t>(vocab_));
    double loss = 0;
    r.expert_tokens.assign(1, std::vector<double>(4, 0.0));
    for (int64_t t = 0; t < n; ++t) {
      const size_t row = inputs[t] * static_cast<size_t>(vocab_);
      double max = -1e30;
      for (int64_t v = 0; v < vocab_; ++v) max = std::max(max, static_cast<double>(w_[row + v] + b_[v]));
      double sum = 0;
      for (int64_t v = 0; v < vocab_; ++v) sum += p[v] = std::exp(w_[row + v] + b_[v] - max);
      loss += std::log(sum) + max - (w_[row + targets[t]] + b_[targets[t]]);
      for (int64_t v = 0; v < vocab_; ++v) {
        const double g = grad_scale * (p[v] / sum - (v == static_cast<int64_t>(targets[t]) ? 1.0 : 0.0)) / n;
        gw_[row + v] += static_cast<float>(g);
        gb_[v] += static_cast<float>(g);
      }
      // fake routing: the expert with the largest (affinity + bias); affinity favours input mod 4
      int best = 0;
      for (int e = 1; e < 4; ++e)
        if ((e == static_cast<int>(inputs[t] % 4)) + bias_[e] > (best == static_cast<int>(inputs[t] % 4)) + bias_[best])
          best = e;
      r.expert_tokens[0][best] += 1;
      step_loads_[best] += 1;
    }
    r.loss.main = loss / n;
    r.loss.total = r.loss.main;
    if (poison) {
      r.loss.total = r.loss.main = std::nan("");
      gw_[0] = std::nanf("");
    }
    return r;
  }

  void after_step() override {
    double mean = 0;
    for (double l : step_loads_) mean += l / 4;
    for (int e = 0; e < 4; ++e) bias_[e] += step_loads_[e] < mean ? 0.01f : (step_loads_[e] > mean ? -0.01f : 0.0f);
    step_loads_.fill(0);
    ++step_;
    ++applied_;
  }
  void discard_step() override {
    step_loads_.fill(0);
    ++step_;
  }

  double eval_loss_sum(const Token* inputs, const Token* targets, int64_t batch, int64_t seq_len) override {
    double loss = 0;
    for (int64_t t = 0; t < batch * seq_len; ++t) {
      const size_t row = inputs[t] * static_cast<size_t>(vocab_);
      double max = -1e30, sum = 0;
      for (int64_t v = 0; v < vocab_; ++v) max = std::max(max, static_cast<double>(w_[row + v] + b_[v]));
      for (int64_t v = 0; v < vocab_; ++v) sum += std::exp(w_[row + v] + b_[v] - max);
      loss += std::log(sum) + max - (w_[row + targets[t]] + b_[targets[t]]);
    }
    return loss;
  }

  std::vector<float> next_token_logits(const Token* inputs, int64_t batch, int64_t seq_len) override {
    std::vector<float> out;
    for (int64_t b = 0; b < batch; ++b) {
      const size_t row = inputs[b * seq_len + seq_len - 1] * static_cast<size_t>(vocab_);
      for (int64_t v = 0; v < vocab_; ++v) out.push_back(w_[row + v] + b_[v]);
    }
    return out;
  }

  // The step counter follows the trainer's (set it when resuming a model built fresh).
  void set_step(int64_t s) { step_ = s; }

  std::set<int64_t> nan_at_steps;  // 0-based optimizer steps whose forward is poisoned
  std::vector<float> w_, gw_, b_, gb_, bias_;
  int64_t applied_ = 0;

 private:
  int64_t vocab_;
  int64_t step_ = 0;
  std::array<double, 4> step_loads_{};
};

}  // namespace fp8train::train::testing
