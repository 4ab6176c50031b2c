// Expert parallelism (dist/expert_parallel.h, model::MoE::set_expert_parallel) under mpiexec -np N: a MoE layer
// with its routed experts sharded over N EP ranks, each rank holding its own tokens, against ONE MoE layer with
// every expert run (on every rank) over all ranks' tokens — the outputs, the input gradients, the owned experts'
// weight gradients and the expert loads, bit for bit (the experts see the same rows in the same order and
// padding, so the arithmetic is the same), in the fp32 recipe on F64 tensors and in fp8-deepseek (FP8 dispatch
// with power-of-two scales, BF16 combine). The replicated parameters' gradients (router, shared expert) are
// partial sums over each rank's tokens; their sum over ranks matches one rank's to a stated tolerance. The
// bytes each rank moved are printed from Communicator::stats().
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "mpi_world.h"
#include "dist/expert_parallel.h"
#include "dist/mpi_communicator.h"
#include "model/activation_store.h"
#include "model/moe.h"
#include "ops/elementwise.h"

using namespace fp8train;
using namespace fp8train::dist;

namespace {

std::vector<double> as_doubles(const Tensor& t) {
  if (t.dtype() == DType::F64) return t.clone().to_vector<double>();
  const Tensor f = Tensor::empty(t.shape(), DType::F32);  // F32 holds every BF16 value
  ops::copy(ExecCtx::cpu(), t.is_contiguous() ? t : t.clone(), f);
  const std::vector<float> v = f.to_vector<float>();
  return {v.begin(), v.end()};
}

// Uniform(-1, 1) values, the same on every rank (seeded alike), in `dtype`.
Tensor random_matrix(int64_t rows, int64_t cols, DType dtype, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> v(static_cast<size_t>(rows * cols));
  for (double& x : v) x = u(rng);
  if (dtype == DType::F64) return Tensor::from_vector(v, {rows, cols});
  const Tensor f = Tensor::from_vector(std::vector<float>(v.begin(), v.end()), {rows, cols});
  const Tensor t = Tensor::empty({rows, cols}, dtype);
  ops::copy(ExecCtx::cpu(), f, t);
  return t;
}

model::ModelConfig ep_config(int64_t n_experts) {
  model::ModelConfig c = model::tiny_test_config();
  c.hidden_size = 32;
  c.moe_intermediate_size = 16;
  c.n_routed_experts = n_experts;
  c.num_experts_per_tok = 2;
  c.n_group = n_experts % 4 == 0 ? 4 : 1;
  c.topk_group = c.n_group > 1 ? 2 : 1;
  c.n_shared_experts = 1;
  c.seq_aux_loss_alpha = 0.0;  // per sequence of the rank's own tokens; not part of the exchange
  return c;
}

// One MoE layer with its own parameters (F32 masters, F64 in the F64 runs) and store; the same weights on every
// rank (the same seed); activations in `dt`.
struct Layer {
  recipe::RecipeConfig recipe;
  model::ParameterSet params;
  model::ActivationStore store;
  model::MoE moe;
  DType dtype;
  Layer(const std::string& spec, const model::ModelConfig& c, DType dt, bool skew = false)
      : recipe(recipe::parse_recipe(spec)),
        store(recipe),
        moe(params, "moe", c, dt == DType::F64 ? DType::F64 : DType::F32, 1),
        dtype(dt) {
    params.initialize(5, 0.3);
    // biases that steer selection a little, so the bias path is exercised too
    std::vector<float> b(static_cast<size_t>(c.n_routed_experts));
    for (size_t e = 0; e < b.size(); ++e) b[e] = skew ? (e < 2 ? 10.0f : 0.0f) : 0.01f * static_cast<float>(e % 3);
    Tensor bias = moe.bias();
    bias.copy_from(Tensor::from_vector(b, bias.shape()));
  }
  model::StepContext ctx(int64_t batch, int64_t seq) {
    return {.exec = ExecCtx::cpu(),
            .batch = batch,
            .seq = seq,
            .training = true,
            .recipe = &recipe,
            .store = &store,
            .dtype = dtype};
  }
  // forward + backward of Σ dy∘MoE(u): the output and ∂/∂u
  std::pair<Tensor, Tensor> run(const Tensor& u, const Tensor& dy, int64_t batch, int64_t seq) {
    const model::StepContext c = ctx(batch, seq);
    model::MoE::State st;
    const Tensor y = moe.forward(c, u, &st, nullptr, true);
    const Tensor du = Tensor::empty(u.shape(), dtype);
    moe.backward(c, st, dy, u, du, false);
    return {y, du};
  }
};

struct Case {
  std::string recipe;
  DType dtype;
  int64_t n_experts;
  double replicated_tol;  // on the replicated gradients summed over ranks (relative to their max)
  // which replicated gradients to check: in the FP8 recipes the shared expert's Wgrad quantizes x and dy in
  // 128-token tiles, which a split of the tokens regroups — a data-parallel property, not the exchange's
  bool check_shared = true;
  // router biases that send every token to experts 0 and 1 (EP rank 0's): the other ranks receive nothing
  bool skew = false;
};

void check_equivalence(const Case& k) {
  Communicator& w = world();
  const int P = w.size(), rank = w.rank();
  const model::ModelConfig c = ep_config(k.n_experts);
  const int64_t batch = 2, seq = 8, n = batch * seq, d = c.hidden_size;
  const Tensor u_all = random_matrix(P * n, d, k.dtype, 11), dy_all = random_matrix(P * n, d, k.dtype, 12);
  // one rank, every expert, all ranks' tokens
  Layer one(k.recipe, c, k.dtype, k.skew);
  const auto [y_all, du_all] = one.run(u_all, dy_all, P * batch, seq);
  // EP over the world, this rank's tokens
  Layer ep(k.recipe, c, k.dtype, k.skew);
  ep.moe.set_expert_parallel(&w);
  const int64_t L = k.n_experts / P, first = rank * L;
  ASSERT_EQ(ep.moe.local_experts(), L);
  ASSERT_EQ(ep.moe.first_local_expert(), first);
  w.reset_stats();
  const auto [y, du] =
      ep.run(u_all.rows(rank * n, (rank + 1) * n).clone(), dy_all.rows(rank * n, (rank + 1) * n).clone(), batch, seq);
  const CommStats stats = w.stats();
  const std::string what = fmt::format("{} {} E={} rank {} of {}", k.recipe, dtype_name(k.dtype), k.n_experts, rank, P);

  const std::vector<double> y_want = as_doubles(y_all.rows(rank * n, (rank + 1) * n));
  const std::vector<double> du_want = as_doubles(du_all.rows(rank * n, (rank + 1) * n));
  EXPECT_EQ(as_doubles(y), y_want) << what << ": outputs";
  EXPECT_EQ(as_doubles(du), du_want) << what << ": input gradients";
  // the owned experts' weight gradients bit for bit; the others untouched here
  for (int64_t e = 0; e < k.n_experts; ++e)
    for (const char* m : {"w1", "w2", "w3"}) {
      const std::string name = fmt::format("moe.experts.{}.{}.weight", e, m);
      const std::vector<double> g = as_doubles(ep.params.get(name).grad);
      if (e >= first && e < first + L) {
        EXPECT_EQ(g, as_doubles(one.params.get(name).grad)) << what << ": " << name;
      } else {
        for (double x : g) ASSERT_EQ(x, 0.0) << what << ": " << name << " is not this rank's expert";
      }
    }
  // the loads: the EP group's totals, as one rank counts them over all tokens
  EXPECT_EQ(ep.moe.pending_load(), one.moe.pending_load()) << what << ": loads";
  int64_t total = 0;
  for (int64_t l : ep.moe.pending_load()) total += l;
  EXPECT_EQ(total, P * n * c.num_experts_per_tok) << what;
  if (k.skew) {
    EXPECT_EQ(ep.moe.pending_load()[0], P * n) << what << ": the skew must route every token to expert 0";
  }
  // replicated parameters: partial gradients over this rank's tokens, summed over ranks
  std::vector<std::string> replicated{"moe.gate.weight"};
  if (k.check_shared)
    replicated.insert(replicated.end(), {"moe.shared_experts.w1.weight", "moe.shared_experts.w2.weight"});
  for (const std::string& name : replicated) {
    const std::vector<double> sum = sum_in_rank_order(w, as_doubles(ep.params.get(name).grad), ExecCtx::cpu());
    const std::vector<double> want = as_doubles(one.params.get(name).grad);
    double scale = 0, err = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      scale = std::max(scale, std::abs(want[i]));
      err = std::max(err, std::abs(sum[i] - want[i]));
    }
    EXPECT_GT(scale, 0.0) << what << ": " << name;
    EXPECT_LE(err, k.replicated_tol * scale) << what << ": " << name;
  }
  // the bias update: every EP rank moves alike, as one rank does
  ep.moe.update_bias(0.001);
  one.moe.update_bias(0.001);
  EXPECT_EQ(ep.moe.bias().to_vector<float>(), one.moe.bias().to_vector<float>()) << what << ": biases";
  EXPECT_GT(stats.bytes_sent, 0) << what;
  fmt::print("expert parallel {}: {} calls, {} bytes sent, {} received (one forward + backward of {} tokens)\n", what,
             stats.calls, stats.bytes_sent, stats.bytes_received, n);
}

TEST(ExpertParallel, MoeLayerEqualsOneRankFp32F64) { check_equivalence({"fp32", DType::F64, 8, 1e-14}); }

TEST(ExpertParallel, MoeLayerEqualsOneRankFp8DeepSeekBf16) {
  check_equivalence({"fp8-deepseek", DType::BF16, 8, 1e-6, false});
}

// Every token routed to EP rank 0's experts: the other ranks send all their rows and receive none.
TEST(ExpertParallel, AllTokensToOneRanksExperts) {
  check_equivalence({"fp32", DType::F64, 8, 1e-14, true, true});
  check_equivalence({"fp8-deepseek", DType::BF16, 8, 1e-6, false, true});
}

// One expert per rank: the local Linear is a plain GEMM over its rows.
TEST(ExpertParallel, OneExpertPerRank) {
  check_equivalence({"fp32", DType::F64, world().size(), 1e-14});
  check_equivalence({"fp8-deepseek", DType::BF16, world().size(), 1e-6, false});
}

TEST(ExpertParallel, ExpertsNotDivisibleByEpAreRefused) {
  Communicator& w = world();
  const model::ModelConfig c = ep_config(w.size() * 2 + 1);
  Layer ep("fp32", c, DType::F64);
  try {
    ep.moe.set_expert_parallel(&w);
    FAIL() << "set_expert_parallel accepted experts not divisible by ep";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot be split evenly"), std::string::npos) << e.what();
  }
  EXPECT_THROW(expert_shard(6, 4, 0, "moe"), Error);
  EXPECT_NO_THROW(expert_shard(8, 4, 3, "moe"));
}

TEST(ExpertParallel, NodeLimitedRoutingLayoutCheck) {
  // 64 experts over ep 16 on 2 nodes of 8: 32 experts per node; 8 groups of 8 experts -> 4 groups per node
  EXPECT_NO_THROW(check_node_limited_routing(64, 8, 16, 8));
  // 3 groups of 16 (48 experts, ep 4, 2 ranks per node: 24 per node) are not whole per node
  EXPECT_THROW(check_node_limited_routing(48, 3, 4, 2), Error);
  EXPECT_THROW(check_node_limited_routing(64, 8, 12, 8), Error);  // 12 ranks do not fill nodes of 8
  EXPECT_NO_THROW(check_node_limited_routing(64, 1, 8, 8));       // one node: nothing to limit
}

}  // namespace
