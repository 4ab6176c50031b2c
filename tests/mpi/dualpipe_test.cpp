// DualPipeV on CPU ranks against the sequential model: a stack of 2P dense tanh layers in FP64, one layer per stage,
// trained one step over M micro-batches by the pipeline executor on the PP group, gives the same loss and the same
// gradients (within 1e-12) as the layers run one after another on one rank. Pipelines of every world size that
// test_mpi runs under (2 and 4 ranks), and of 2 ranks each when the world splits into pairs.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "mpi_world.h"
#include "dist/dualpipe.h"
#include "dist/mpi_communicator.h"
#include "dist/pipeline_executor.h"

using namespace fp8train;
using namespace fp8train::dist;

namespace {

const ExecCtx& cpu() { return ExecCtx::cpu(); }

constexpr int kRows = 3, kDim = 5;  // a micro-batch: kRows vectors of kDim
using Vec = std::vector<double>;

// The toy model: layer l maps x [kRows, kDim] to tanh(x Wₗᵀ + bₗ); the loss is Σ_m ½‖y_m − t_m‖² / M.
struct Layer {
  Vec w, b;  // w [kDim, kDim] row-major (out, in)
};

Layer make_layer(int l) {
  Layer layer{Vec(kDim * kDim), Vec(kDim)};
  // Near the identity, so that the gradient reaches the first layers undiminished.
  for (int i = 0; i < kDim * kDim; ++i)
    layer.w[static_cast<size_t>(i)] = (i % (kDim + 1) == 0 ? 1.0 : 0.0) + 0.3 * std::sin(1.0 + 0.37 * i + 1.3 * l);
  for (int i = 0; i < kDim; ++i) layer.b[static_cast<size_t>(i)] = 0.1 * std::cos(0.5 * i + 0.7 * l);
  return layer;
}
Vec input_of(int mb) {
  Vec x(kRows * kDim);
  for (int i = 0; i < kRows * kDim; ++i) x[static_cast<size_t>(i)] = std::sin(0.3 * i + 1.7 * mb);
  return x;
}
Vec target_of(int mb) {
  Vec t(kRows * kDim);
  for (int i = 0; i < kRows * kDim; ++i) t[static_cast<size_t>(i)] = 0.5 * std::cos(0.2 * i + 0.9 * mb);
  return t;
}

Vec layer_forward(const Layer& layer, const Vec& x) {
  Vec y(kRows * kDim);
  for (int i = 0; i < kRows; ++i)
    for (int j = 0; j < kDim; ++j) {
      double z = layer.b[static_cast<size_t>(j)];
      for (int k = 0; k < kDim; ++k)
        z += x[static_cast<size_t>(i * kDim + k)] * layer.w[static_cast<size_t>(j * kDim + k)];
      y[static_cast<size_t>(i * kDim + j)] = std::tanh(z);
    }
  return y;
}
// dz = dy ⊙ (1 − y²); returns dx = dz W.
Vec layer_backward_input(const Layer& layer, const Vec& y, const Vec& dy, Vec& dz) {
  dz.assign(kRows * kDim, 0.0);
  for (size_t i = 0; i < dz.size(); ++i) dz[i] = dy[i] * (1.0 - y[i] * y[i]);
  Vec dx(kRows * kDim, 0.0);
  for (int i = 0; i < kRows; ++i)
    for (int k = 0; k < kDim; ++k)
      for (int j = 0; j < kDim; ++j)
        dx[static_cast<size_t>(i * kDim + k)] +=
            dz[static_cast<size_t>(i * kDim + j)] * layer.w[static_cast<size_t>(j * kDim + k)];
  return dx;
}
void layer_backward_weight(const Vec& x, const Vec& dz, Layer& grad) {
  for (int i = 0; i < kRows; ++i)
    for (int j = 0; j < kDim; ++j) {
      const double d = dz[static_cast<size_t>(i * kDim + j)];
      grad.b[static_cast<size_t>(j)] += d;
      for (int k = 0; k < kDim; ++k)
        grad.w[static_cast<size_t>(j * kDim + k)] += d * x[static_cast<size_t>(i * kDim + k)];
    }
}
Vec loss_gradient(const Vec& y, const Vec& t, int mbs, double& loss) {
  Vec dy(y.size());
  for (size_t i = 0; i < y.size(); ++i) {
    loss += 0.5 * (y[i] - t[i]) * (y[i] - t[i]) / mbs;
    dy[i] = (y[i] - t[i]) / mbs;
  }
  return dy;
}

struct Reference {
  double loss = 0;
  std::vector<Layer> grads;
};

// The sequential model: every micro-batch forward through all layers, then backward, gradients summed in order.
Reference sequential(int layers, int mbs) {
  Reference ref;
  std::vector<Layer> params;
  for (int l = 0; l < layers; ++l) {
    params.push_back(make_layer(l));
    ref.grads.push_back({Vec(kDim * kDim, 0.0), Vec(kDim, 0.0)});
  }
  for (int m = 0; m < mbs; ++m) {
    std::vector<Vec> xs{input_of(m)};
    for (int l = 0; l < layers; ++l) xs.push_back(layer_forward(params[static_cast<size_t>(l)], xs.back()));
    Vec dy = loss_gradient(xs.back(), target_of(m), mbs, ref.loss);
    for (int l = layers - 1; l >= 0; --l) {
      Vec dz;
      dy = layer_backward_input(params[static_cast<size_t>(l)], xs[static_cast<size_t>(l + 1)], dy, dz);
      layer_backward_weight(xs[static_cast<size_t>(l)], dz, ref.grads[static_cast<size_t>(l)]);
    }
  }
  return ref;
}

// This rank's two layers as pipeline stages.
class ToyStages final : public PipelineStages {
 public:
  ToyStages(int rank, int ranks, int mbs) : rank_(rank), ranks_(ranks), mbs_(mbs) {
    for (int c = 0; c < 2; ++c) {
      params_[c] = make_layer(dualpipev_stage(rank, c, ranks));
      grads_[c] = {Vec(kDim * kDim, 0.0), Vec(kDim, 0.0)};
      x_[c].resize(static_cast<size_t>(mbs));
      y_[c].resize(static_cast<size_t>(mbs));
      dz_[c].resize(static_cast<size_t>(mbs));
    }
  }
  Tensor forward(int chunk, int mb, const Tensor& input) override {
    const int s = dualpipev_stage(rank_, chunk, ranks_);
    EXPECT_EQ(input.defined(), s != 0) << "stage " << s;
    Vec x = s == 0 ? input_of(mb) : input.to_vector<double>();
    Vec y = layer_forward(params_[chunk], x);
    x_[chunk][static_cast<size_t>(mb)] = std::move(x);
    y_[chunk][static_cast<size_t>(mb)] = y;
    return Tensor::from_vector(y, {kRows, kDim});
  }
  Tensor backward_input(int chunk, int mb, const Tensor& grad_output) override {
    const int s = dualpipev_stage(rank_, chunk, ranks_);
    const Vec& y = y_[chunk][static_cast<size_t>(mb)];
    EXPECT_FALSE(y.empty()) << "backward before forward: stage " << s << " mb " << mb;
    const Vec dy = s == 2 * ranks_ - 1 ? loss_gradient(y, target_of(mb), mbs_, loss_) : grad_output.to_vector<double>();
    const Vec dx = layer_backward_input(params_[chunk], y, dy, dz_[chunk][static_cast<size_t>(mb)]);
    return Tensor::from_vector(dx, {kRows, kDim});
  }
  void backward_weight(int chunk, int mb) override {
    Vec& dz = dz_[chunk][static_cast<size_t>(mb)];
    EXPECT_FALSE(dz.empty()) << "weight backward before input backward: chunk " << chunk << " mb " << mb;
    layer_backward_weight(x_[chunk][static_cast<size_t>(mb)], dz, grads_[chunk]);
    ++weight_calls_;
  }
  Tensor receive_buffer(int, int, Payload) override { return Tensor::zeros({kRows, kDim}, DType::F64); }

  double loss() const { return loss_; }
  const Layer& grad(int chunk) const { return grads_[chunk]; }
  int weight_calls() const { return weight_calls_; }

 private:
  int rank_, ranks_, mbs_;
  Layer params_[2], grads_[2];
  std::vector<Vec> x_[2], y_[2], dz_[2];
  double loss_ = 0;
  int weight_calls_ = 0;
};

void expect_near_all(const Vec& got, const Vec& want, const char* what, int stage) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-12) << what << " of stage " << stage << " element " << i;
}

// One training step of the toy model on the pipeline `pp`, checked on every rank against the sequential model.
void check_pipeline_equals_sequential(Communicator& pp, int mbs) {
  const int P = pp.size();
  const PipeSchedule schedule = dualpipev_schedule(P, mbs);
  ToyStages stages(pp.rank(), P, mbs);
  run_pipeline(schedule, pp, stages, cpu());
  const Reference ref = sequential(2 * P, mbs);
  for (int c = 0; c < 2; ++c) {
    const int s = dualpipev_stage(pp.rank(), c, P);
    const Layer& want = ref.grads[static_cast<size_t>(s)];
    expect_near_all(stages.grad(c).w, want.w, "weight gradient", s);
    expect_near_all(stages.grad(c).b, want.b, "bias gradient", s);
    double norm = 0;
    for (double g : want.w) norm += g * g;
    EXPECT_GT(norm, 1e-4) << "the reference gradient of stage " << s << " vanishes: the comparison would be empty";
  }
  EXPECT_EQ(stages.weight_calls(), 2 * mbs) << "each chunk's weight backward once per micro-batch";
  // The loss lives on rank 0 (the last stage); every rank checks the broadcast value.
  const Tensor loss = Tensor::from_vector(std::vector<double>{stages.loss()}, {1});
  pp.broadcast(loss, 0, cpu());
  EXPECT_EQ(loss.to_vector<double>()[0], ref.loss) << "pipeline loss vs sequential loss";
  EXPECT_GT(ref.loss, 0.0);
}

}  // namespace

TEST(DualPipeV, WholeWorldPipelineEqualsSequentialModel) {
  for (int mbs : {2 * world().size(), 2 * world().size() + 3}) {
    SCOPED_TRACE(::testing::Message() << world().size() << " ranks, " << mbs << " micro-batches");
    check_pipeline_equals_sequential(world(), mbs);
  }
}

TEST(DualPipeV, PairsOfRanksPipelineEqualsSequentialModel) {
  if (world().size() % 2 != 0) GTEST_SKIP() << "an odd world does not split into pairs";
  auto pair = world().split(world().rank() / 2, world().rank() % 2, "pp");
  for (int mbs : {4, 7}) {
    SCOPED_TRACE(::testing::Message() << "2 ranks, " << mbs << " micro-batches");
    check_pipeline_equals_sequential(*pair, mbs);
  }
}

TEST(DualPipeV, PipelineTrafficIsOneActivationAndOneGradientPerCrossing) {
  // Stage boundaries that cross ranks: 2(P−1) of the 2P−1; each moves one activation and one gradient per mb.
  const int P = world().size(), mbs = 2 * P;
  auto pp = world().split(0, world().rank(), "pp");
  ToyStages stages(pp->rank(), P, mbs);
  pp->reset_stats();
  run_pipeline(dualpipev_schedule(P, mbs), *pp, stages, cpu());
  const int64_t bytes = kRows * kDim * 8;
  // Rank r sends activations across the boundaries it produces: stage r → r+1 (r < P−1) and stage 2P−1−r → 2P−r
  // (r > 0), and as many gradients back.
  const int crossings = (pp->rank() < P - 1 ? 1 : 0) + (pp->rank() > 0 ? 1 : 0);
  EXPECT_EQ(pp->stats().bytes_sent, 2 * crossings * mbs * bytes);
  EXPECT_EQ(pp->stats().bytes_received, 2 * crossings * mbs * bytes);
}
