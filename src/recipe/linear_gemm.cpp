// LinearGemm (linear_gemm.h): Fprop / Dgrad / Wgrad under a recipe, the health counters and the context.
// Operand layouts follow quant::ref_gemm: D[M, N] = A[M, K]·B[N, K]ᵀ, all row-major.
#include "recipe/linear_gemm.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/error.h"
#include "numerics/formats.h"
#include "ops/gemm.h"
#include "quant/ref_gemm.h"

namespace fp8train::recipe {

// ---- health ----------------------------------------------------------------------------------------------
void OperandHealth::merge(const OperandHealth& o) {
  elements += o.elements;
  nonzero += o.nonzero;
  saturated += o.saturated;
  underflow += o.underflow;
  scale_min = std::min(scale_min, o.scale_min);
  scale_max = std::max(scale_max, o.scale_max);
}

OperandHealth measure_health(const float* x, const quant::QTensor& q) {
  OperandHealth h;
  h.elements = q.rows * q.cols;
  for (float s : q.row_major_scales()) {
    if (!std::isfinite(s)) continue;
    h.scale_min = std::min(h.scale_min, s);
    h.scale_max = std::max(h.scale_max, s);
  }
  // A value saturates when it would have rounded above the largest code: beyond fmax plus half its ulp
  // (a scale one float ulp off its ideal value must not count).
  float limit = quant::format_max(q.format());
  switch (q.format()) {
    case quant::Format::E4M3: limit = 464.0f; break;     // 448 + 32 / 2
    case quant::Format::E5M2: limit = 61440.0f; break;   // 57344 + 8192 / 2
    case quant::Format::E5M6: limit = 65280.0f; break;   // 65024 + 512 / 2
    case quant::Format::INT8: limit = 127.5f; break;
    case quant::Format::BF16: break;
  }
  int64_t nonzero = 0, saturated = 0, underflow = 0;
#pragma omp parallel for schedule(static) reduction(+ : nonzero, saturated, underflow)
  for (int64_t r = 0; r < q.rows; ++r) {
    for (int64_t c = 0; c < q.cols; ++c) {
      const float v = x[r * q.cols + c];
      if (v == 0.0f || std::isnan(v)) continue;
      ++nonzero;
      const float s = q.scale_of(r, c);
      if (std::fabs(v) / s > limit) ++saturated;
      if (q.decoded_at(r, c) == 0.0f) ++underflow;
    }
  }
  h.nonzero = nonzero;
  h.saturated = saturated;
  h.underflow = underflow;
  return h;
}

double GemmAccuracy::relative_error() const {
  if (reference_sq > 0) return std::sqrt(error_sq / reference_sq);
  return error_sq > 0 ? std::numeric_limits<double>::infinity() : 0.0;
}

// A serial double-precision sum: the figure must not depend on the thread count (the runs do not).
GemmAccuracy measure_accuracy(const float* y, const float* y_ref, int64_t rows, int64_t cols) {
  GemmAccuracy a;
  for (int64_t i = 0; i < rows; ++i) {
    double err = 0, ref = 0;
    for (int64_t j = 0; j < cols; ++j) {
      const double r = y_ref[i * cols + j], d = static_cast<double>(y[i * cols + j]) - r;
      err += d * d;
      ref += r * r;
    }
    a.error_sq += err;
    a.reference_sq += ref;
    if (ref > 0) {
      a.row_rel_sum += std::sqrt(err / ref);
      ++a.rows;
    }
  }
  return a;
}

void RecipeContext::record(const std::string& linear, GemmKind kind, const OperandHealth& a, const OperandHealth& b,
                           const GemmAccuracy& accuracy) {
  std::lock_guard<std::mutex> lock(mutex_);
  GemmHealth& g = health_[{linear, static_cast<int>(kind)}];
  g.linear = linear;
  g.kind = kind;
  g.quantized = true;
  ++g.calls;
  g.a.merge(a);
  g.b.merge(b);
  g.accuracy.merge(accuracy);
}

void RecipeContext::record(const std::string& linear, GemmKind kind, const GemmAccuracy& accuracy) {
  std::lock_guard<std::mutex> lock(mutex_);
  GemmHealth& g = health_[{linear, static_cast<int>(kind)}];
  g.linear = linear;
  g.kind = kind;
  ++g.calls;
  g.accuracy.merge(accuracy);
}

std::vector<GemmHealth> RecipeContext::take_health() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<GemmHealth> out;
  out.reserve(health_.size());
  for (auto& [key, g] : health_) out.push_back(g);
  health_.clear();
  return out;
}

namespace {
uint64_t mix64(uint64_t x) {  // SplitMix64 finaliser
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
uint64_t hash_name(const std::string& s) {  // FNV-1a: stable across runs and platforms
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char ch : s) h = (h ^ ch) * 0x100000001B3ull;
  return h;
}
}  // namespace

uint64_t RecipeContext::seed_for(uint64_t layer_hash, uint64_t call) const {
  return mix64(mix64(mix64(config_.seed) ^ static_cast<uint64_t>(step_)) ^ layer_hash) ^ mix64(call);
}

// ---- host views of tensors -------------------------------------------------------------------------------
namespace {
void check_matrix(const char* what, const Tensor& t) {
  FP8T_CHECK(t.defined() && t.is_matrix() && t.dtype() == DType::F32 && t.device().is_cpu(),
             "linear gemm: {} must be a 2-D f32 matrix view on the cpu, got {}", what,
             t.defined() ? t.str() : std::string("an undefined tensor"));
}

// A contiguous float pointer to a matrix view (copying rows when the view is strided).
struct HostMatrix {
  const float* data = nullptr;
  std::vector<float> copy;
  explicit HostMatrix(const Tensor& t) {
    const int64_t rows = t.size(0), cols = t.size(1);
    if (t.is_contiguous() || rows <= 1) {
      data = t.data<float>();
      return;
    }
    copy.resize(static_cast<size_t>(rows * cols));
    const float* base = t.data<float>();
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(copy.data() + r * cols, base + r * t.ld(), static_cast<size_t>(cols) * sizeof(float));
    data = copy.data();
  }
};

// out (+)= d, d contiguous [rows, cols]; one float32 add per element when accumulating (what ref_gemm's
// accumulate-into-C does).
void write_output(const Tensor& out, const std::vector<float>& d, bool accumulate) {
  const int64_t rows = out.size(0), cols = out.size(1);
  float* base = out.data<float>();
  const int64_t ld = rows > 1 ? out.ld() : cols;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    float* o = base + r * ld;
    const float* s = d.data() + r * cols;
    if (accumulate) {
      for (int64_t c = 0; c < cols; ++c) o[c] = o[c] + s[c];
    } else {
      std::memcpy(o, s, static_cast<size_t>(cols) * sizeof(float));
    }
  }
}

// A 128×128-block quantization re-expressed with one scale per row per 128 columns (each row of a block
// repeats the block's scale): the same values, in the 1×128 × 128×128 pairing ref_gemm accepts. Used by the
// dgrad_block ablation.
quant::QTensor blocks_as_row_tiles(const quant::QTensor& q) {
  quant::QTensor t = q;
  t.spec.granularity = quant::Granularity::row_tile(q.granularity().block_cols);
  const int64_t sc = q.scale_cols();
  t.rowwise.scales = Tensor::zeros({q.rows, sc}, DType::F32, MemCategory::Workspace, Device::cpu());
  float* dst = t.scale_ptr();
  const float* src = q.scale_ptr();
  for (int64_t r = 0; r < q.rows; ++r)
    for (int64_t c = 0; c < sc; ++c) dst[r * sc + c] = src[(r / q.granularity().block_rows) * sc + c];
  return t;
}

// The product d [m, n] (contiguous) against the FP32 reference op(a)·op(b) — ops::gemm on the unrounded inputs,
// what the fp32 recipe computes (see "GEMM accuracy" in linear_gemm.h).
GemmAccuracy against_reference(const std::vector<float>& d, const Tensor& a, bool trans_a, const Tensor& b,
                               bool trans_b) {
  const int64_t m = trans_a ? a.size(1) : a.size(0), n = trans_b ? b.size(0) : b.size(1);
  FP8T_CHECK(static_cast<int64_t>(d.size()) == m * n, "gemm accuracy: product has {} elements, reference {}x{}",
             d.size(), m, n);
  Tensor r = Tensor::empty({m, n}, DType::F32, MemCategory::Workspace, Device::cpu());
  ops::gemm(ExecCtx::cpu(), a, trans_a, b, trans_b, r);
  return measure_accuracy(d.data(), r.data<float>(), m, n);
}

// An fp32 / bf16 GEMM's own product (its options without accumulation) against the reference.
GemmAccuracy plain_accuracy(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, bool bf16) {
  const int64_t m = trans_a ? a.size(1) : a.size(0), n = trans_b ? b.size(0) : b.size(1);
  Tensor y = Tensor::empty({m, n}, DType::F32, MemCategory::Workspace, Device::cpu());
  ops::GemmOptions o;
  o.round_inputs_bf16 = bf16;
  ops::gemm(ExecCtx::cpu(), a, trans_a, b, trans_b, y, o);
  return against_reference(y.to_vector<float>(), a, trans_a, b, trans_b);
}

bool cache_matches(const quant::QTensor& q, CacheFormat format) {
  if (format == CacheFormat::Fp32 || format == CacheFormat::Bf16) return false;
  const quant::QuantSpec c = cache_quant_config(format);
  return q.format() == c.format && q.granularity() == c.granularity &&
         (c.granularity.per_tensor || q.pow2_scales == (c.scale_mode == quant::ScaleMode::PowerOfTwo));
}
}  // namespace

// ---- LinearGemm ----------------------------------------------------------------------------------------------
LinearGemm::LinearGemm(RecipeContext& context, std::string name, LinearOptions options)
    : context_(&context),
      name_(std::move(name)),
      options_(options),
      history_x_(context.config().amax_history, context.config().amax_algorithm),
      history_w_(context.config().amax_history, context.config().amax_algorithm),
      history_dy_(context.config().amax_history, context.config().amax_algorithm),
      name_hash_(hash_name(name_)) {}

uint64_t LinearGemm::next_seed() {
  if (seed_step_ != context_->step()) {
    seed_step_ = context_->step();
    seed_calls_ = 0;
  }
  return context_->seed_for(name_hash_, seed_calls_++);
}

CachedActivation LinearGemm::forward(const Tensor& x, const Tensor& w, const Tensor& y, bool cache_input) {
  check_matrix("x", x);
  check_matrix("w", w);
  check_matrix("y", y);
  const int64_t tokens = x.size(0), in = x.size(1), out = w.size(0);
  FP8T_CHECK(w.size(1) == in, "linear {}: x is {} but w is {} (expected [out, {}])", name_, x.str(), w.str(), in);
  FP8T_CHECK(y.size(0) == tokens && y.size(1) == out, "linear {}: y must be [{}, {}], got {}", name_, tokens, out,
             y.str());
  const RecipeConfig& cfg = context_->config();
  const CacheFormat cache_format = cfg.cache_format(options_.input_role);
  dy_uses_left_ = 0;

  if (!cfg.quantized_gemms()) {
    ops::GemmOptions o;
    o.round_inputs_bf16 = cfg.kind == RecipeKind::Bf16;
    ops::gemm(ExecCtx::cpu(), x, false, w, true, y, o);
    if (context_->sampling_health())
      context_->record(name_, GemmKind::Fprop, plain_accuracy(x, false, w, true, o.round_inputs_bf16));
    weight_operand_bytes_ = static_cast<size_t>(w.numel()) * (o.round_inputs_bf16 ? 2 : 4);
    return cache_input ? CachedActivation::store(x, cache_format) : CachedActivation();
  }

  const GemmOperands g = gemm_operands(cfg, GemmKind::Fprop);
  HostMatrix xh(x), wh(w);
  quant::QTensor a, b;
  if (cfg.per_tensor()) {
    a = quant::quantize_delayed(xh.data, tokens, in, g.a, history_x_);
    weight_scale_ = history_w_.scale(g.b.format, g.b.scale_mode);
    have_weight_scale_ = true;
    b = quant::quantize_delayed(wh.data, out, in, g.b, history_w_);
  } else {
    quant::QuantSpec qa = g.a;
    if (options_.dispatched_input && cfg.moe_dispatch_fp8) qa.scale_mode = quant::ScaleMode::PowerOfTwo;
    a = quant::quantize(xh.data, tokens, in, qa);
    b = quant::quantize(wh.data, out, in, g.b);
  }
  weight_operand_bytes_ = b.bytes();
  const std::vector<float> d = quant::ref_gemm(a, b, g.gemm);
  if (context_->sampling_health())
    context_->record(name_, GemmKind::Fprop, measure_health(xh.data, a), measure_health(wh.data, b),
                     against_reference(d, x, false, w, true));
  write_output(y, d, false);

  if (!cache_input) return CachedActivation();
  // Wgrad reuses the Fprop quantization when the cache format is the same representation.
  if (cache_matches(a, cache_format)) return CachedActivation::adopt(a, cache_format);
  return CachedActivation::store(xh.data, tokens, in, cache_format);
}

const quant::QTensor& LinearGemm::tensorwise_dy(const Tensor& dy, const float* dyh) {
  if (dy_uses_left_ > 0 && dy_ptr_ == dy.raw() && dy_q_.rows == dy.size(0) && dy_q_.cols == dy.size(1)) {
    --dy_uses_left_;
    return dy_q_;
  }
  const GemmOperands gd = gemm_operands(context_->config(), GemmKind::Dgrad);
  dy_q_ = quant::quantize_delayed(dyh, dy.size(0), dy.size(1), gd.a, history_dy_);
  dy_ptr_ = dy.raw();
  dy_uses_left_ = 1;  // the other GEMM of this backward
  return dy_q_;
}

void LinearGemm::dgrad(const Tensor& dy, const Tensor& w, const Tensor& dx, bool accumulate) {
  check_matrix("dy", dy);
  check_matrix("w", w);
  check_matrix("dx", dx);
  const int64_t tokens = dy.size(0), out = dy.size(1), in = w.size(1);
  FP8T_CHECK(w.size(0) == out, "linear {}: dy is {} but w is {}", name_, dy.str(), w.str());
  FP8T_CHECK(dx.size(0) == tokens && dx.size(1) == in, "linear {}: dx must be [{}, {}], got {}", name_, tokens, in,
             dx.str());
  const RecipeConfig& cfg = context_->config();
  if (!cfg.quantized_gemms()) {
    ops::GemmOptions o;
    o.round_inputs_bf16 = cfg.kind == RecipeKind::Bf16;
    o.beta = accumulate ? 1.0 : 0.0;
    ops::gemm(ExecCtx::cpu(), dy, false, w, false, dx, o);
    if (context_->sampling_health())
      context_->record(name_, GemmKind::Dgrad, plain_accuracy(dy, false, w, false, o.round_inputs_bf16));
    return;
  }
  const bool health = context_->sampling_health();
  const GemmOperands g = gemm_operands(cfg, GemmKind::Dgrad);
  HostMatrix dyh(dy), wh(w);
  if (cfg.per_tensor()) {
    FP8T_CHECK(have_weight_scale_, "linear {}: backward before forward (no weight scale yet)", name_);
    const quant::QTensor& dq = tensorwise_dy(dy, dyh.data);
    const quant::QTensor wq = quant::quantize_with_scale(wh.data, out, in, g.b.format, weight_scale_);
    const std::vector<float> d = quant::ref_gemm(dq, quant::transpose(wq), g.gemm);
    if (health)
      context_->record(name_, GemmKind::Dgrad, measure_health(dyh.data, dq), measure_health(wh.data, wq),
                       against_reference(d, dy, false, w, false));
    write_output(dx, d, accumulate);
    return;
  }
  quant::QuantSpec qa = g.a;
  if (qa.rounding == quant::Rounding::Stochastic) qa.seed = next_seed();
  if (options_.dispatched_grad && cfg.moe_dispatch_fp8) {
    qa.scale_mode = quant::ScaleMode::PowerOfTwo;
    qa.granularity = quant::Granularity::tile_1x128();  // the dispatched tensor's own tiles
  }
  quant::QTensor a = quant::quantize(dyh.data, tokens, out, qa);
  const quant::QTensor wq = quant::quantize(wh.data, out, in, g.b);
  const OperandHealth health_a = health ? measure_health(dyh.data, a) : OperandHealth{};
  if (!a.granularity().per_tensor && a.granularity().block_rows > 1) a = blocks_as_row_tiles(a);
  const std::vector<float> d = quant::ref_gemm(a, quant::transpose(wq), g.gemm);
  if (health)
    context_->record(name_, GemmKind::Dgrad, health_a, measure_health(wh.data, wq),
                     against_reference(d, dy, false, w, false));
  write_output(dx, d, accumulate);
}

void LinearGemm::wgrad(const Tensor& dy, const CachedActivation& x, const Tensor& dw, bool accumulate) {
  FP8T_CHECK(x.defined() && x.rows() == dy.size(0), "linear {}: Wgrad needs the cached input with {} rows", name_,
             dy.size(0));
  if (!context_->config().quantized_gemms()) {
    wgrad(dy, x.to_tensor(), dw, accumulate);
    return;
  }
  if (x.quantized()) {
    wgrad_impl(dy, nullptr, &x, x.cols(), dw, accumulate);
    return;
  }
  const std::vector<float> xv = x.values();
  wgrad_impl(dy, xv.data(), nullptr, x.cols(), dw, accumulate);
}

void LinearGemm::wgrad(const Tensor& dy, const Tensor& x, const Tensor& dw, bool accumulate) {
  check_matrix("x", x);
  FP8T_CHECK(x.size(0) == dy.size(0), "linear {}: x is {} but dy is {}", name_, x.str(), dy.str());
  if (!context_->config().quantized_gemms()) {
    check_matrix("dy", dy);
    check_matrix("dw", dw);
    ops::GemmOptions o;
    o.round_inputs_bf16 = context_->config().kind == RecipeKind::Bf16;
    o.beta = accumulate ? 1.0 : 0.0;
    ops::gemm(ExecCtx::cpu(), dy, true, x, false, dw, o);
    if (context_->sampling_health())
      context_->record(name_, GemmKind::Wgrad, plain_accuracy(dy, true, x, false, o.round_inputs_bf16));
    return;
  }
  HostMatrix xh(x);
  wgrad_impl(dy, xh.data, nullptr, x.size(1), dw, accumulate);
}

void LinearGemm::wgrad_impl(const Tensor& dy, const float* xv, const CachedActivation* xc, int64_t in,
                            const Tensor& dw, bool accumulate) {
  check_matrix("dy", dy);
  check_matrix("dw", dw);
  const int64_t tokens = dy.size(0), out = dy.size(1);
  FP8T_CHECK(dw.size(0) == out && dw.size(1) == in, "linear {}: dw must be [{}, {}], got {}", name_, out, in,
             dw.str());
  const RecipeConfig& cfg = context_->config();  // a quantized recipe (the callers route fp32 / bf16 to ops::gemm)
  const bool health = context_->sampling_health();
  const GemmOperands g = gemm_operands(cfg, GemmKind::Wgrad);
  HostMatrix dyh(dy);
  std::vector<float> xvalues;  // x values when health needs them and only the cache was given
  auto x_values = [&]() -> const float* {
    if (xv) return xv;
    if (xvalues.empty()) xvalues = xc->values();
    return xvalues.data();
  };
  // The FP32 reference dyᵀ·x: dy as given (before any dispatch quantization), x as handed in.
  auto accuracy = [&](const std::vector<float>& d) {
    const float* x0 = x_values();
    const Tensor xt = Tensor::from_vector(std::vector<float>(x0, x0 + tokens * in), {tokens, in},
                                           MemCategory::Workspace, Device::cpu());
    return against_reference(d, dy, true, xt, false);
  };

  if (cfg.per_tensor()) {
    const quant::QTensor& dq = tensorwise_dy(dy, dyh.data);
    quant::QTensor xq;
    if (xc && xc->quant().granularity().per_tensor && xc->quant().format() == g.b.format) {
      xq = xc->quant();
    } else {
      xq = quant::quantize(x_values(), tokens, in, g.b);
    }
    const std::vector<float> d = quant::ref_gemm(quant::transpose(dq), quant::transpose(xq), g.gemm);
    if (health)
      context_->record(name_, GemmKind::Wgrad, measure_health(dyh.data, dq), measure_health(x_values(), xq),
                       accuracy(d));
    write_output(dw, d, accumulate);
    return;
  }

  // Both operands are tiled along tokens: quantize 128×1 on the [tokens, ·] matrices, then transpose.
  quant::QuantSpec qa = g.a, qb = g.b;
  qa.granularity = qa.granularity.transposed();
  qb.granularity = qb.granularity.transposed();
  if (qa.rounding == quant::Rounding::Stochastic) qa.seed = next_seed();
  const float* dy_values = dyh.data;
  std::vector<float> dispatched;
  if (options_.dispatched_grad && cfg.moe_dispatch_fp8) {
    // The expert received dy as FP8 with power-of-two 1×128 scales; Wgrad re-tiles those values.
    quant::QuantSpec d = g.a;
    d.scale_mode = quant::ScaleMode::PowerOfTwo;
    d.granularity = quant::Granularity::tile_1x128();
    d.rounding = quant::Rounding::Nearest;
    dispatched = quant::dequantize(quant::quantize(dyh.data, tokens, out, d));
    dy_values = dispatched.data();
  }
  const quant::QTensor dq = quant::quantize(dy_values, tokens, out, qa);
  quant::QTensor xq;
  if (xc && xc->quant().format() == qb.format) {
    xq = quant::retile(xc->quant(), qb);  // exact when both sides use power-of-two scales (quant.h)
  } else {
    xq = quant::quantize(x_values(), tokens, in, qb);
  }
  const std::vector<float> d = quant::ref_gemm(quant::transpose(dq), quant::transpose(xq), g.gemm);
  if (health)
    context_->record(name_, GemmKind::Wgrad, measure_health(dy_values, dq), measure_health(x_values(), xq),
                     accuracy(d));
  write_output(dw, d, accumulate);
}

void LinearGemm::backward(const Tensor& dy, const Tensor& w, const CachedActivation& x, const Tensor& dx,
                          const Tensor& dw, bool accumulate_dx, bool accumulate_dw) {
  if (dx.defined()) dgrad(dy, w, dx, accumulate_dx);
  if (dw.defined()) wgrad(dy, x, dw, accumulate_dw);
}

}  // namespace fp8train::recipe
