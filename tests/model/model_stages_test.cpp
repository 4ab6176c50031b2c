// The model cut into pipeline stages (DeepSeekV3Model::stage_forward / stage_backward) against forward_backward,
// in one process: for 1 to 4 stages of a 4-block FP64 model with MoE and MTP, every micro-batch through the stages
// gives the same losses (the stages' totals add up) and the same gradients of every parameter; several micro-batches
// in flight at once, their backwards in another order, change nothing (each StageRun keeps its own state); how the
// blocks are cut; bad arguments refused.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "../common/random_data.h"
#include "common/error.h"
#include "model/model.h"

namespace fp8train::model {
namespace {

ModelConfig four_blocks() {
  ModelConfig c = tiny_test_config();
  c.n_layers = 4;  // 1 dense block, 3 MoE blocks, MTP depth 1
  c.init_std = 0.3;
  return c;
}

struct MicroBatch {
  Tensor inputs, targets;
  int64_t batch = 2;
};

MicroBatch micro_batch(int64_t vocab, uint64_t seed) {
  const int64_t batch = 2, seq = 5;
  const test_data::LmTokens t = test_data::lm_tokens(vocab, batch, seq, seed);
  return {Tensor::from_vector(t.inputs, {batch * seq}), Tensor::from_vector(t.targets, {batch * seq}), batch};
}

void expect_same_gradients(DeepSeekV3Model& got, DeepSeekV3Model& want, double tolerance) {
  int nonzero = 0;
  for (Parameter* p : want.parameters().trainable()) {
    const std::vector<double> w = p->grad.to_vector<double>();
    const std::vector<double> g = got.parameters().get(p->name).grad.to_vector<double>();
    ASSERT_EQ(g.size(), w.size());
    double largest = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      EXPECT_NEAR(g[i], w[i], tolerance) << p->name << " element " << i;
      largest = std::max(largest, std::abs(w[i]));
    }
    if (largest > 1e-8) ++nonzero;
  }
  EXPECT_GT(nonzero, 20) << "most parameters should have gradients";
}

TEST(ModelStages, StagesInSequenceEqualForwardBackward) {
  const ModelConfig c = four_blocks();
  const std::vector<MicroBatch> mbs = {micro_batch(c.vocab_size, 1), micro_batch(c.vocab_size, 2),
                                       micro_batch(c.vocab_size, 3)};
  DeepSeekV3Model ref(c, {.dtype = DType::F64, .seed = 5});
  ref.zero_grad();
  std::vector<LossBreakdown> want;
  for (const MicroBatch& mb : mbs) want.push_back(ref.forward_backward(mb.inputs, mb.targets, mb.batch, 1.0 / 3));
  for (int stages = 1; stages <= 4; ++stages) {
    SCOPED_TRACE(::testing::Message() << stages << " stages");
    DeepSeekV3Model m(c, {.dtype = DType::F64, .seed = 5});
    m.zero_grad();
    for (size_t k = 0; k < mbs.size(); ++k) {
      std::vector<DeepSeekV3Model::StageRun> runs(static_cast<size_t>(stages));
      Tensor x;
      double total = 0, balance = 0;
      for (int s = 0; s < stages; ++s) {
        x = m.stage_forward(s, stages, mbs[k].inputs, mbs[k].targets, mbs[k].batch, x, 1.0 / 3,
                            runs[static_cast<size_t>(s)]);
        EXPECT_EQ(x.defined(), s + 1 < stages);
        total += runs[static_cast<size_t>(s)].loss.total;
        balance += runs[static_cast<size_t>(s)].loss.balance;
      }
      const LossBreakdown& last = runs.back().loss;
      EXPECT_EQ(last.main, want[k].main);
      EXPECT_EQ(last.mtp, want[k].mtp);
      EXPECT_EQ(last.main_tokens, want[k].main_tokens);
      EXPECT_NEAR(balance, want[k].balance, 1e-15);
      EXPECT_NEAR(total, want[k].total, 1e-14);
      EXPECT_GT(want[k].balance, 0.0);
      Tensor dy;
      for (int s = stages; s-- > 0;) {
        dy = m.stage_backward(dy, runs[static_cast<size_t>(s)]);
        EXPECT_EQ(dy.defined(), s > 0);
      }
    }
    expect_same_gradients(m, ref, 1e-12);
  }
}

TEST(ModelStages, MicroBatchesInFlightTogetherKeepTheirOwnState) {
  // Two stages; all three micro-batches' forwards first, then their backwards in reverse order (a pipeline
  // interleaves them likewise).
  const ModelConfig c = four_blocks();
  const std::vector<MicroBatch> mbs = {micro_batch(c.vocab_size, 4), micro_batch(c.vocab_size, 5),
                                       micro_batch(c.vocab_size, 6)};
  DeepSeekV3Model ref(c, {.dtype = DType::F64, .seed = 6}), m(c, {.dtype = DType::F64, .seed = 6});
  ref.zero_grad();
  m.zero_grad();
  for (const MicroBatch& mb : mbs) ref.forward_backward(mb.inputs, mb.targets, mb.batch, 0.5);
  std::vector<std::vector<DeepSeekV3Model::StageRun>> runs(mbs.size());
  for (size_t k = 0; k < mbs.size(); ++k) {
    runs[k].resize(2);
    const Tensor h = m.stage_forward(0, 2, mbs[k].inputs, mbs[k].targets, mbs[k].batch, {}, 0.5, runs[k][0]);
    m.stage_forward(1, 2, mbs[k].inputs, mbs[k].targets, mbs[k].batch, h, 0.5, runs[k][1]);
  }
  for (size_t k = mbs.size(); k-- > 0;) m.stage_backward(m.stage_backward({}, runs[k][1]), runs[k][0]);
  expect_same_gradients(m, ref, 1e-12);
}

TEST(ModelStages, BlocksCutEvenlyAndBadArgumentsRefused) {
  ModelConfig c = four_blocks();
  c.n_layers = 7;
  DeepSeekV3Model m(c, {.dtype = DType::F64, .seed = 1});
  EXPECT_EQ(m.stage_blocks(0, 3), std::make_pair(0, 3));
  EXPECT_EQ(m.stage_blocks(1, 3), std::make_pair(3, 5));
  EXPECT_EQ(m.stage_blocks(2, 3), std::make_pair(5, 7));
  EXPECT_EQ(m.stage_blocks(0, 1), std::make_pair(0, 7));
  EXPECT_THROW(m.stage_blocks(0, 8), Error);  // more stages than blocks
  EXPECT_THROW(m.stage_blocks(3, 3), Error);
  const MicroBatch mb = micro_batch(c.vocab_size, 1);
  DeepSeekV3Model::StageRun run;
  // Stage 1 needs the previous stage's output.
  EXPECT_THROW(m.stage_forward(1, 2, mb.inputs, mb.targets, mb.batch, Tensor(), 1.0, run), Error);
  EXPECT_THROW(m.stage_backward(Tensor(), run), Error);  // no forward
}

}  // namespace
}  // namespace fp8train::model
