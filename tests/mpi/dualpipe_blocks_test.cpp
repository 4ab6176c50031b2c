// DualPipeV over fp8train's own transformer blocks on CPU ranks: 2P DeepSeek-V3 blocks (MLA attention, then a dense
// SwiGLU FFN or DeepSeekMoE, alternating), one per stage, in FP64 with the fp32 recipe, trained one step over M
// micro-batches by the pipeline executor give the same objective (Σ_m ⟨y_m, w_m⟩ + the MoE balance losses) and
// the same parameter gradients within 1e-12 as the blocks run one micro-batch after another. It shows the blocks'
// per-micro-batch states (Block::State, the stateless ActivationStore) survive the schedule's interleaving of
// micro-batches — what cutting the model into stages relies on (docs/distributed.md). A stage's B step runs
// Block::backward with its Linears' Wgrad GEMMs queued (StepContext::wgrad_queue) and its W step runs them, as
// train::ModelStages does; Block::backward rewrites its ∂L/∂y in place, so the queued plain operands are copies.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "mpi_world.h"
#include "dist/dualpipe.h"
#include "dist/mpi_communicator.h"
#include "dist/pipeline_executor.h"
#include "model/block.h"
#include "model/parameter.h"

using namespace fp8train;
using namespace fp8train::dist;
using namespace fp8train::model;

namespace {

const ExecCtx& cpu() { return ExecCtx::cpu(); }

constexpr int64_t kBatch = 2, kSeq = 4;  // a micro-batch: 2 sequences of 4 tokens

ModelConfig config() {
  ModelConfig c = tiny_test_config();
  c.init_std = 0.3;  // gradients well away from zero, so 1e-12 is a real bound
  return c;
}

Tensor pattern(int64_t rows, int64_t cols, double a, double b, double scale) {
  std::vector<double> v(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * std::sin(a * static_cast<double>(i) + b);
  return Tensor::from_vector(v, {rows, cols});
}
Tensor input_of(int mb) { return pattern(kBatch * kSeq, config().hidden_size, 0.31, 1.1 * mb, 1.0); }
Tensor weight_of(int mb) { return pattern(kBatch * kSeq, config().hidden_size, 0.17, 0.7 * mb + 0.3, 0.5); }

// 2P blocks "layers.<s>" in one parameter set, the same values on every rank.
struct Stack {
  recipe::RecipeConfig recipe = recipe::parse_recipe("fp32");
  ActivationStore store{recipe};
  ParameterSet params;
  std::vector<std::unique_ptr<Block>> blocks;
  explicit Stack(int stages) {
    const ModelConfig c = config();
    for (int s = 0; s < stages; ++s)
      blocks.push_back(std::make_unique<Block>(params, "layers." + std::to_string(s), c, DType::F64, s, s % 2 == 1));
    params.initialize(3, c.init_std);
  }
  StepContext ctx() {
    StepContext c;
    c.exec = ExecCtx::cpu();
    c.batch = kBatch;
    c.seq = kSeq;
    c.training = true;
    c.recipe = &recipe;
    c.store = &store;
    c.dtype = DType::F64;
    return c;
  }
};

double dot(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double s = 0;
  for (size_t i = 0; i < x.size(); ++i) s += x[i] * y[i];
  return s;
}

class BlockStages final : public PipelineStages {
 public:
  BlockStages(int rank, int ranks, int mbs) : rank_(rank), ranks_(ranks), stack_(2 * ranks) {
    for (auto& states : states_) states.resize(static_cast<size_t>(mbs));
    for (auto& queues : wgrads_) queues.resize(static_cast<size_t>(mbs));
  }
  Tensor forward(int chunk, int mb, const Tensor& input) override {
    const int s = dualpipev_stage(rank_, chunk, ranks_);
    double balance = 0;
    Tensor y = stack_.blocks[static_cast<size_t>(s)]->forward(stack_.ctx(), s == 0 ? input_of(mb) : input,
                                                              &states_[chunk][static_cast<size_t>(mb)], &balance);
    objective_ += balance;
    if (s == 2 * ranks_ - 1) objective_ += dot(y, weight_of(mb));
    return y;
  }
  Tensor backward_input(int chunk, int mb, const Tensor& grad_output) override {
    const int s = dualpipev_stage(rank_, chunk, ranks_);
    // Block::backward works in place: ∂L/∂y in, ∂L/∂x out.
    const Tensor d = s == 2 * ranks_ - 1 ? weight_of(mb) : grad_output;
    Block::State& st = states_[chunk][static_cast<size_t>(mb)];
    StepContext ctx = stack_.ctx();
    ctx.wgrad_queue = &wgrads_[chunk][static_cast<size_t>(mb)];
    stack_.blocks[static_cast<size_t>(s)]->backward(ctx, st, d);
    st = Block::State{};  // what this micro-batch kept is freed, as a stage would
    return d;
  }
  void backward_weight(int chunk, int mb) override {
    WgradQueue& queue = wgrads_[chunk][static_cast<size_t>(mb)];
    for (auto& wgrad : queue) wgrad();
    wgrads_in_w_ += static_cast<int64_t>(queue.size());
    queue.clear();
  }
  Tensor receive_buffer(int, int, Payload) override {
    return Tensor::zeros({kBatch * kSeq, config().hidden_size}, DType::F64);
  }

  double objective() const { return objective_; }
  Stack& stack() { return stack_; }
  int64_t wgrads_in_w() const { return wgrads_in_w_; }

 private:
  int rank_, ranks_;
  Stack stack_;
  std::vector<Block::State> states_[2];
  std::vector<WgradQueue> wgrads_[2];
  int64_t wgrads_in_w_ = 0;
  double objective_ = 0;  // this rank's part: its blocks' balance losses (+ Σ⟨y, w⟩ on rank 0)
};

}  // namespace

TEST(DualPipeVBlocks, PipelineOfTransformerBlocksEqualsSequentialBlocks) {
  Communicator& pp = world();
  const int P = pp.size(), mbs = 2 * P + 1, S = 2 * P;
  BlockStages stages(pp.rank(), P, mbs);
  run_pipeline(dualpipev_schedule(P, mbs), pp, stages, cpu());
  const double objective = sum_in_rank_order(pp, stages.objective(), cpu());
  // Every Linear of both blocks queued its Wgrad in B and ran it in W: per micro-batch and block at least the
  // attention's five projections and the FFN's two.
  EXPECT_GE(stages.wgrads_in_w(), 2 * mbs * 7) << "the W steps carried too few Wgrad GEMMs";

  // The same blocks, one micro-batch after another through all of them.
  Stack ref(S);
  double want = 0;
  for (int m = 0; m < mbs; ++m) {
    std::vector<Block::State> st(static_cast<size_t>(S));
    Tensor x = input_of(m);
    for (int s = 0; s < S; ++s) {
      double balance = 0;
      x = ref.blocks[static_cast<size_t>(s)]->forward(ref.ctx(), x, &st[static_cast<size_t>(s)], &balance);
      want += balance;
    }
    want += dot(x, weight_of(m));
    const Tensor d = weight_of(m);
    for (int s = S - 1; s >= 0; --s)
      ref.blocks[static_cast<size_t>(s)]->backward(ref.ctx(), st[static_cast<size_t>(s)], d);
  }
  EXPECT_NEAR(objective, want, 1e-12 * std::max(1.0, std::abs(want)));

  int compared = 0;
  for (int chunk = 0; chunk < 2; ++chunk) {
    const std::string prefix = "layers." + std::to_string(dualpipev_stage(pp.rank(), chunk, P)) + ".";
    for (Parameter* p : stages.stack().params.trainable()) {
      if (p->name.rfind(prefix, 0) != 0) continue;
      const std::vector<double> got = p->grad.to_vector<double>();
      const std::vector<double> exp = ref.params.get(p->name).grad.to_vector<double>();
      ASSERT_EQ(got.size(), exp.size());
      double largest = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_NEAR(got[i], exp[i], 1e-12) << p->name << " element " << i;
        largest = std::max(largest, std::abs(exp[i]));
      }
      if (largest > 1e-6) ++compared;
    }
  }
  // Every block has its attention and FFN/MoE weights: many tensors with gradients that matter.
  EXPECT_GE(compared, 10) << "too few non-trivial gradients compared on rank " << pp.rank();
}
