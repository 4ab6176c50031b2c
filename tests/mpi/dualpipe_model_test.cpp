// DualPipeV over fp8train's whole model on CPU ranks: a DeepSeek-V3-style model (MLA, dense and MoE blocks, MTP)
// with 2P blocks in FP64, cut into 2P stages (train::ModelStages: rank 0 holds the embedding, the first and the
// last blocks, the head and MTP), trained one step over 2P+1 micro-batches by the pipeline executor, gives every
// micro-batch's losses (the ranks' parts summed) and every parameter's gradient as forward_backward over the same
// micro-batches on one rank: losses within 1e-13, gradients within 1e-12; a rank leaves the parameters of the
// other ranks' stages untouched.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "../common/random_data.h"
#include "mpi_world.h"
#include "dist/dualpipe.h"
#include "dist/mpi_communicator.h"
#include "dist/pipeline_executor.h"
#include "model/model.h"
#include "train/pipeline_model.h"

using namespace fp8train;
using namespace fp8train::dist;

namespace {

train::ModelStages::MicroBatch micro_batch(int64_t vocab, uint64_t seed) {
  const int64_t batch = 2, seq = 5;
  const test_data::LmTokens t = test_data::lm_tokens(vocab, batch, seq, seed);
  return {Tensor::from_vector(t.inputs, {batch * seq}), Tensor::from_vector(t.targets, {batch * seq}), batch};
}

// The rank whose stages use parameter `name` (blocks by their stage; embedding, head, final norm and MTP: rank 0).
int owner(const std::string& name, const model::DeepSeekV3Model& m, int ranks) {
  if (name.rfind("layers.", 0) != 0) return 0;
  const int block = std::stoi(name.substr(7));
  for (int s = 0; s < 2 * ranks; ++s) {
    const auto [first, last] = m.stage_blocks(s, 2 * ranks);
    if (block >= first && block < last) return dualpipev_rank(s, ranks);
  }
  return -1;
}

}  // namespace

TEST(DualPipeVModel, WholeModelPipelineEqualsForwardBackward) {
  Communicator& pp = world();
  const int P = pp.size(), mbs = 2 * P + 1;
  model::ModelConfig c = model::tiny_test_config();
  c.n_layers = 2 * P;  // one block per stage: block 0 dense, the others MoE
  c.init_std = 0.3;    // gradients well above 1e-12
  std::vector<train::ModelStages::MicroBatch> batches;
  for (int m = 0; m < mbs; ++m) batches.push_back(micro_batch(c.vocab_size, 100 + static_cast<uint64_t>(m)));
  const double scale = 1.0 / mbs;

  model::DeepSeekV3Model piped(c, {.dtype = DType::F64, .seed = 9});
  piped.zero_grad();
  train::ModelStages stages(piped, pp.rank(), P, batches, scale);
  run_pipeline(dualpipev_schedule(P, mbs), pp, stages, ExecCtx::cpu());
  EXPECT_GE(stages.wgrad_gemms_in_w(), 2 * mbs * 7) << "the W steps carried the Linears' Wgrad GEMMs";
  std::vector<double> totals, mains;
  for (const model::LossBreakdown& l : stages.losses()) {
    totals.push_back(l.total);
    mains.push_back(l.main);
  }
  totals = sum_in_rank_order(pp, totals, ExecCtx::cpu());
  mains = sum_in_rank_order(pp, mains, ExecCtx::cpu());  // only rank 0's are non-zero

  model::DeepSeekV3Model ref(c, {.dtype = DType::F64, .seed = 9});
  ref.zero_grad();
  for (int m = 0; m < mbs; ++m) {
    const auto& b = batches[static_cast<size_t>(m)];
    const model::LossBreakdown want = ref.forward_backward(b.inputs, b.targets, b.batch, scale);
    EXPECT_EQ(mains[static_cast<size_t>(m)], want.main) << "micro-batch " << m;
    EXPECT_NEAR(totals[static_cast<size_t>(m)], want.total, 1e-13) << "micro-batch " << m;
    EXPECT_GT(want.balance, 0.0);
    EXPECT_GT(want.mtp, 0.0);
  }

  int mine = 0;
  for (model::Parameter* p : ref.parameters().trainable()) {
    const int o = owner(p->name, ref, P);
    ASSERT_GE(o, 0) << p->name;
    const std::vector<double> want = p->grad.to_vector<double>();
    const std::vector<double> got = piped.parameters().get(p->name).grad.to_vector<double>();
    ASSERT_EQ(got.size(), want.size());
    if (o == pp.rank()) {
      ++mine;
      for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << p->name << " element " << i;
    } else {
      for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], 0.0) << p->name << " is rank " << o << "'s";
    }
  }
  EXPECT_GT(mine, 10) << "rank " << pp.rank() << " compared too few parameters";
}
