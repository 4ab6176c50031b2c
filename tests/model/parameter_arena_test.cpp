// ParameterSet::finalize on the tiny DeepSeek-V3 model: every trainable parameter moves into one value arena and one
// gradient arena (same layout), values unchanged, views in registration order, fused buffers (SwiGLU w1|w3, all
// experts' W1|W3) kept as one region, decay and no-decay parameters in two contiguous ranges, and the layers'
// own tensors reading and writing the arenas (a forward/backward after finalize gives the same loss and gradients,
// and the gradients land in the gradient arena). Plus the errors finalize gives for buffers it cannot move.
#include <gtest/gtest.h>

#include <random>

#include "model/model.h"
#include "tensor/backend.h"

namespace fp8train::model {
namespace {

struct Batch {
  Tensor inputs, targets;
  int64_t batch = 0;
};

Batch random_batch(int64_t batch, int64_t seq, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> in(static_cast<size_t>(batch * seq)), tg(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    in[i] = static_cast<int32_t>(rng() % vocab);
    tg[i] = static_cast<int32_t>(rng() % vocab);
  }
  return {Tensor::from_vector(in, {batch * seq}), Tensor::from_vector(tg, {batch * seq}), batch};
}

bool inside(const Tensor& t, const Arena& arena) {
  const char* p = static_cast<const char*>(t.raw());
  const char* begin = static_cast<const char*>(arena.flat().raw());
  return p >= begin && p + t.nbytes() <= begin + arena.nbytes();
}

// A model built with a shard of the experts (expert parallelism, ModelOptions::ep): it registers only its experts,
// under their global indices and with the values the whole model gives them; their regions come first in the
// arena (the local-expert group), inside the weight-decay range, and everything else keeps the whole model's values.
TEST(ParameterArena, AShardOfTheExpertsIsAPrefixOfTheArena) {
  const ModelConfig c = tiny_test_config();
  ASSERT_EQ(c.n_routed_experts % 2, 0);
  DeepSeekV3Model whole(c, {.seed = 7});
  DeepSeekV3Model shard(c, {.seed = 7, .ep = 2, .ep_rank = 1});
  ParameterSet& ws = whole.parameters();
  ParameterSet& ss = shard.parameters();
  ws.finalize();
  ss.finalize();
  EXPECT_TRUE(ws.expert_range().empty());
  const ArenaRange x = ss.expert_range();
  ASSERT_FALSE(x.empty());
  EXPECT_EQ(x.begin, 0);
  EXPECT_EQ(ss.decay_range().begin, 0);
  EXPECT_GE(ss.decay_range().end, x.end);
  EXPECT_LE(ss.decay_range().end, ss.no_decay_range().begin);
  int64_t held = 0, dropped = 0;
  const int64_t E = c.n_routed_experts;
  for (Parameter* p : ws.trainable()) {
    const Parameter* q = ss.find(p->name);
    const size_t at = p->name.find(".experts.");
    if (at == std::string::npos) {
      ASSERT_NE(q, nullptr) << p->name;
      EXPECT_FALSE(q->local_experts);
      EXPECT_EQ(q->value.to_vector<float>(), p->value.to_vector<float>()) << p->name;
      continue;
    }
    const int64_t e = std::stoll(p->name.substr(at + 9));
    if (e < E / 2) {  // shard 0's
      EXPECT_EQ(q, nullptr) << p->name;
      ++dropped;
      continue;
    }
    ASSERT_NE(q, nullptr) << p->name;
    EXPECT_TRUE(q->local_experts);
    const ArenaLayout::View& v = ss.value_arena().layout().view(p->name);
    EXPECT_LE(v.offset + v.numel, x.end) << p->name;
    EXPECT_EQ(q->value.to_vector<float>(), p->value.to_vector<float>()) << p->name;
    ++held;
  }
  EXPECT_GT(held, 0);
  EXPECT_EQ(held, dropped);
}

TEST(ParameterArena, FinalizeMovesEveryParameterAndKeepsValues) {
  DeepSeekV3Model m(tiny_test_config(), {.seed = 7});
  ParameterSet& ps = m.parameters();
  std::vector<std::vector<float>> before;
  for (Parameter* p : ps.trainable()) before.push_back(p->value.to_vector<float>());
  EXPECT_FALSE(ps.finalized());
  EXPECT_THROW((void)ps.value_arena(), Error);
  const int64_t weights_before = backend(Device::cpu()).allocator().stats().current_of(MemCategory::Weights);
  ps.finalize();
  ASSERT_TRUE(ps.finalized());
  const Arena& values = ps.value_arena();
  const Arena& grads = ps.grad_arena();
  EXPECT_EQ(values.layout_ptr(), grads.layout_ptr());
  EXPECT_EQ(values.category(), MemCategory::Weights);
  EXPECT_EQ(grads.category(), MemCategory::Gradients);
  EXPECT_EQ(values.dtype(), DType::F32);
  // Weights booked: the arena (with its alignment slack) replaced the separate blocks; the router biases are
  // still their own.
  const int64_t weights_after = backend(Device::cpu()).allocator().stats().current_of(MemCategory::Weights);
  EXPECT_EQ(weights_after, weights_before - ps.trainable_count() * 4 + static_cast<int64_t>(values.nbytes()) +
                               static_cast<int64_t>(ArenaLayout::kBaseAlignBytes));
  const auto params = ps.trainable();
  const ArenaLayout& layout = values.layout();
  ASSERT_EQ(layout.views().size(), params.size());
  EXPECT_EQ(layout.view_elements(), ps.trainable_count());
  for (size_t i = 0; i < params.size(); ++i) {
    const Parameter& p = *params[i];
    SCOPED_TRACE(p.name);
    EXPECT_EQ(layout.view(i).name, p.name);  // registration order
    EXPECT_EQ(layout.view(i).shape, p.value.shape());
    EXPECT_EQ(p.value.to_vector<float>(), before[i]);
    EXPECT_EQ(p.value.raw(), values.view(i).raw());  // the parameter's own tensor is the arena view
    EXPECT_EQ(p.grad.raw(), grads.view(i).raw());
    EXPECT_TRUE(inside(p.value, values));
    EXPECT_EQ(layout.view(i).group, p.weight_decay ? ParameterSet::kDecayGroup : ParameterSet::kNoDecayGroup);
    const ArenaRange r = p.weight_decay ? ps.decay_range() : ps.no_decay_range();
    EXPECT_GE(layout.view(i).offset, r.begin);
    EXPECT_LE(layout.view(i).offset + layout.view(i).numel, r.end);
  }
  // decay first, then no decay; every region aligned
  EXPECT_EQ(ps.decay_range().begin, 0);
  EXPECT_LE(ps.decay_range().end, ps.no_decay_range().begin);
  EXPECT_FALSE(ps.no_decay_range().empty());
  for (const ArenaLayout::Region& r : layout.regions()) EXPECT_EQ(r.offset % ArenaLayout::kAlignElements, 0);
  // fused buffers: w1 and w3 of a SwiGLU and all experts' w1|w3 share one region, adjacent as in the layer
  const ArenaLayout::View& w1 = layout.view("layers.0.ffn.w1.weight");
  const ArenaLayout::View& w3 = layout.view("layers.0.ffn.w3.weight");
  EXPECT_EQ(w1.region, w3.region);
  EXPECT_EQ(w3.offset, w1.offset + w1.numel);
  const ArenaLayout::View& e0w1 = layout.view("layers.1.moe.experts.0.w1.weight");
  const ArenaLayout::View& e0w3 = layout.view("layers.1.moe.experts.0.w3.weight");
  const ArenaLayout::View& e1w1 = layout.view("layers.1.moe.experts.1.w1.weight");
  EXPECT_EQ(e0w1.region, e1w1.region);
  EXPECT_EQ(e0w3.offset, e0w1.offset + e0w1.numel);
  EXPECT_EQ(e1w1.offset, e0w3.offset + e0w3.numel);
  EXPECT_NE(layout.view("layers.1.moe.experts.0.w2.weight").region, e0w1.region);
  // router biases stay buffers, outside the arena
  for (Parameter* b : ps.buffers()) EXPECT_FALSE(inside(b->value, values)) << b->name;
  // finalize is idempotent; trainable parameters cannot be added afterwards
  const void* base = values.flat().raw();
  ps.finalize();
  EXPECT_EQ(ps.value_arena().flat().raw(), base);
  EXPECT_THROW(ps.add("late.weight", {2, 2}, DType::F32, Init::Normal), Error);
}

TEST(ParameterArena, LayersComputeOnTheArenas) {
  const Batch b = random_batch(2, 8, 11, 3);
  DeepSeekV3Model plain(tiny_test_config(), {.seed = 9}), moved(tiny_test_config(), {.seed = 9});
  moved.parameters().finalize();
  plain.zero_grad();
  moved.zero_grad();
  const LossBreakdown lp = plain.forward_backward(b.inputs, b.targets, b.batch);
  const LossBreakdown lm = moved.forward_backward(b.inputs, b.targets, b.batch);
  EXPECT_EQ(lp.total, lm.total);
  const auto pp = plain.parameters().trainable();
  const Arena& grads = moved.parameters().grad_arena();
  for (size_t i = 0; i < pp.size(); ++i)
    EXPECT_EQ(pp[i]->grad.to_vector<float>(), grads.view(i).to_vector<float>()) << pp[i]->name;
  // a write to the value arena is what the next forward computes with
  const Arena& values = moved.parameters().value_arena();
  values.view("layers.0.attn.wo.weight").zero_();
  plain.parameters().get("layers.0.attn.wo.weight").value.zero_();
  EXPECT_EQ(plain.forward(b.inputs, b.targets, b.batch).total, moved.forward(b.inputs, b.targets, b.batch).total);
  // zero_grad clears the gradient arena
  moved.zero_grad();
  for (float g : grads.flat().to_vector<float>()) ASSERT_EQ(g, 0.0f);
}

TEST(ParameterArena, RefusesBuffersItCannotMove) {
  {  // a buffer with elements that belong to no parameter
    ParameterSet ps;
    const Tensor w = Tensor::zeros({4, 3}, DType::F32, MemCategory::Weights);
    const Tensor g = Tensor::zeros({4, 3}, DType::F32, MemCategory::Gradients);
    ps.add_view("a.weight", w.rows(0, 2), g.rows(0, 2), Init::Normal);
    EXPECT_THROW(ps.finalize(), Error);
  }
  {  // one buffer holding a decayed matrix and an undecayed vector
    ParameterSet ps;
    const Tensor w = Tensor::zeros({8}, DType::F32, MemCategory::Weights);
    const Tensor g = Tensor::zeros({8}, DType::F32, MemCategory::Gradients);
    ps.add_view("m.weight", w.narrow(0, 0, 4).view({2, 2}), g.narrow(0, 0, 4).view({2, 2}), Init::Normal);
    ps.add_view("v.weight", w.narrow(0, 4, 4), g.narrow(0, 4, 4), Init::Ones);
    EXPECT_THROW(ps.finalize(), Error);
  }
  {  // gradients that do not mirror the values
    ParameterSet ps;
    const Tensor w = Tensor::zeros({4, 3}, DType::F32, MemCategory::Weights);
    const Tensor g = Tensor::zeros({4, 3}, DType::F32, MemCategory::Gradients);
    ps.add_view("a.weight", w.rows(0, 2), g.rows(2, 4), Init::Normal);
    ps.add_view("b.weight", w.rows(2, 4), g.rows(0, 2), Init::Normal);
    EXPECT_THROW(ps.finalize(), Error);
  }
  {  // mixed dtypes
    ParameterSet ps;
    ps.add("a.weight", {2, 2}, DType::F32, Init::Normal);
    ps.add("b.weight", {2, 2}, DType::F64, Init::Normal);
    EXPECT_THROW(ps.finalize(), Error);
  }
  {  // nothing to move
    ParameterSet ps;
    EXPECT_THROW(ps.finalize(), Error);
  }
  {  // F64 parameters (gradient-check models) get F64 arenas
    ParameterSet ps;
    ps.add("a.weight", {2, 2}, DType::F64, Init::Normal);
    ps.add("a.gain", {2}, DType::F64, Init::Ones);
    ps.initialize(1, 0.1);
    const std::vector<double> gain = ps.get("a.gain").value.to_vector<double>();
    ps.finalize();
    EXPECT_EQ(ps.value_arena().dtype(), DType::F64);
    EXPECT_EQ(ps.value_arena().view("a.gain").to_vector<double>(), gain);
  }
}

}  // namespace
}  // namespace fp8train::model
