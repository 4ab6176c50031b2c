// A bigram language model implementing TrainableModel, small and exact enough to test the trainer's
// machinery (accumulation, skipping, checkpoints, resume, reports) in milliseconds:
//   logits[t] = W[input_t, :] + b                      W: [vocab, vocab], b: [vocab] (1-D: no weight decay)
//   loss = mean_t CE(logits[t], target_t)
// plus a fake 4-expert "router" (expert = input_t mod 4) whose per-expert bias, a non-trainable state tensor,
// moves by ±0.01 toward balance after every applied step, like DeepSeek-V3's bias update.
// W and b live in a value arena and their gradients in a gradient arena (W in the decay range, b in the no-decay
// range), as a real model's parameters do; the arithmetic below works on host pointers into them.
// nan_at_steps: forward_backward returns a NaN loss and NaN gradients while the step counter is in the set.
// The scheduled MTP weight λ and router-bias speed γ are only recorded (the model has neither), for the tests.
#pragma once
#include <array>
#include <cmath>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "train/trainable.h"

namespace fp8train::train::testing {

class BigramModel : public TrainableModel {
 public:
  explicit BigramModel(int64_t vocab, uint64_t seed = 1) : vocab_(vocab) {
    auto layout = std::make_shared<ArenaLayout>();
    const int weight_region = layout->add_region(vocab * vocab, 0);
    const int bias_region = layout->add_region(vocab, 1);
    layout->add_view("bigram.weight", {vocab, vocab}, weight_region, 0);
    layout->add_view("bigram.bias", {vocab}, bias_region, 0);
    layout->finish();
    params_.values = Arena(layout, DType::F32, MemCategory::Weights, Device::cpu());
    params_.grads = Arena(layout, DType::F32, MemCategory::Gradients, Device::cpu());
    params_.decay = layout->group_range(0);
    params_.no_decay = layout->group_range(1);
    router_bias_ = Tensor::zeros({4}, DType::F32, MemCategory::Weights, Device::cpu());
    w_ = params_.values.view(0).data<float>();
    gw_ = params_.grads.view(0).data<float>();
    b_ = params_.values.view(1).data<float>();
    gb_ = params_.grads.view(1).data<float>();
    bias_ = router_bias_.data<float>();
    uint64_t s = seed;
    for (int64_t i = 0; i < vocab * vocab; ++i) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      w_[i] = 0.02f * (static_cast<float>(s >> 40) / static_cast<float>(1 << 24) - 0.5f);
    }
  }

  const optim::ParamArenas& parameters() override { return params_; }
  std::vector<NamedTensor> state() override { return {{"router.bias", router_bias_}}; }
  int64_t vocab_size() const override { return vocab_; }

  // Copies of the weights, bias and router bias, for comparisons.
  std::vector<float> weights() const { return params_.values.view(0).to_vector<float>(); }
  std::vector<float> bias() const { return params_.values.view(1).to_vector<float>(); }
  std::vector<float> router_bias() const { return router_bias_.to_vector<float>(); }

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

  void set_scheduled_values(double mtp_lambda, double bias_update_speed) override {
    scheduled.push_back({mtp_lambda, bias_update_speed});
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
  std::vector<std::pair<double, double>> scheduled;  // the trainer's set_scheduled_values calls (λ, γ), in order
  int64_t applied_ = 0;

 private:
  int64_t vocab_;
  optim::ParamArenas params_;
  Tensor router_bias_;
  float *w_, *gw_, *b_, *gb_, *bias_;  // host pointers into the arenas and the router bias
  int64_t step_ = 0;
  std::array<double, 4> step_loads_{};
};

}  // namespace fp8train::train::testing
