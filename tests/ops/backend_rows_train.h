// Backend test table rows (backend_ops_table.h) of cross-entropy, AdamW and the sum of squares.
//   cross_entropy  F32 and BF16 logits, with and without the in-place gradient, ignored rows (target −1), ragged
//                  vocabularies, −inf logits (a vocabulary mask) and a row-strided view (ld > vocab, the padding must
//                  stay as it was), grad_scale ≠ 1; reference: FP64 logsumexp and softmax of the same (BF16-rounded)
//                  values; CUDA against the CPU by normalized error (the row sums run in another order); F64 logits:
//                  CPU only. CUDA's gradient of aligned rows runs its one-read kernel (widths 32768, 40003 strided and
//                  65536 stage the row in shared memory); F32 70001, BF16 140001, unaligned strides and loss-only rows
//                  its general kernel.
//   cross_entropy_distill  F32 and BF16 logits with a teacher's top-k distribution, with and without the gradient,
//                  ignored rows, a row-strided view; reference: FP64 logsumexp, KL and gradient of the same values;
//                  CPU only (no CUDA kernel yet).
//   adamw          F32 and BF16 moments, with and without weight decay, n not a multiple of 4 or 128; reference:
//                  the formulas in FP64; CUDA against the CPU bit for bit.
//   sum_squares    several segments with gaps, an empty and a repeated one, more chunks than a CTA's 256, chunks
//                  shorter than a tile row, F32 and F64 x; reference: the documented chunk order in FP64 (products
//                  of FP32 values are exact in FP64, so the order alone fixes the bits); CUDA bit for bit.
#pragma once
#include <algorithm>
#include <vector>

#include "backend_ops_table.h"
#include "ops/adamw.h"
#include "ops/cross_entropy.h"
#include "ops/distill.h"
#include "ops/sum_squares.h"

namespace fp8train::backend_test {
namespace train_detail {

// A tensor's values widened to floats (F32 as is, BF16 exactly): BF16 outputs whose CUDA and CPU roundings may
// differ in the last place are compared by normalized error through these.
inline OpResult widened_of(const std::string& name, const Tensor& t) {
  const Tensor h = t.device().is_cpu() ? t.clone() : t.to(Device::cpu());
  if (h.dtype() == DType::F32) return {name, {}, h.to_vector<float>()};
  if (h.dtype() == DType::F64) {
    const std::vector<double> d = h.to_vector<double>();
    return {name, {}, std::vector<float>(d.begin(), d.end())};
  }
  const std::vector<bf16> b = h.to_vector<bf16>();
  OpResult r{name, {}, std::vector<float>(b.size())};
  for (size_t i = 0; i < b.size(); ++i) r.floats[i] = static_cast<float>(b[i]);
  return r;
}

inline float round_to(DType dtype, float v) { return dtype == DType::BF16 ? static_cast<float>(bf16(v)) : v; }

// ---- cross-entropy --------------------------------------------------------------------------------------------
// Logits of moderate spread (|z| up to ~70), every fifth row ignored (target −1), other targets anywhere in the row.
inline std::vector<float> ce_logits(int64_t rows, int64_t ld, uint64_t seed) {
  std::vector<float> z = random_values(rows, ld, seed);
  for (float& v : z) v *= 0.01f;
  return z;
}
inline std::vector<int32_t> ce_targets(int64_t rows, int64_t vocab, uint64_t seed) {
  std::mt19937_64 gen(seed ^ 0x5eedULL);
  std::uniform_int_distribution<int64_t> pick(0, vocab - 1);
  std::vector<int32_t> t(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) t[static_cast<size_t>(r)] = r % 5 == 2 ? -1 : static_cast<int32_t>(pick(gen));
  return t;
}

// A vocabulary mask: −inf at every 7th column from 3 and, in row 0, at every column but the target (so whole
// threads' and warps' shares of that row are −inf). Target columns stay finite.
inline void ce_mask(std::vector<float>& z, int64_t rows, int64_t vocab, int64_t ld, const std::vector<int32_t>& t) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < vocab; ++j)
      if ((r == 0 || j % 7 == 3) && j != t[static_cast<size_t>(r)]) z[static_cast<size_t>(r * ld + j)] = -INFINITY;
}

inline void add_cross_entropy_case(std::vector<BackendOpCase>& out, int64_t rows, int64_t vocab, int64_t ld,
                                   DType dtype, bool grad, double grad_scale, bool on_cuda = true,
                                   bool masked = false) {
  BackendOpCase c;
  c.op = "cross_entropy";
  c.name =
      fmt::format("{} [{}x{}]{}{}{}{}", dtype_name(dtype), rows, vocab, ld > vocab ? fmt::format(" ld {}", ld) : "",
                  masked ? " masked" : "", grad ? " grad" : " loss only",
                  grad && grad_scale != 1.0 ? fmt::format(" scale {}", grad_scale) : "");
  // FP32 arithmetic against FP64: the CPU's sequential FP32 row sum of 70k terms errs by ~1e-5 relative (normalized
  // 1e-10 measured on the loss); BF16 gradients add their last-place roundings. CUDA sums the rows in another order.
  const double bound = dtype == DType::BF16 ? 1e-5 : 1e-8;
  c.cpu = Compare::normalized(bound);
  c.cuda = Compare::normalized(bound);
  c.on_cuda = on_cuda;
  c.run = [=](const ExecCtx& ctx, uint64_t seed) {
    std::vector<float> z = ce_logits(rows, ld, seed);
    const std::vector<int32_t> t = ce_targets(rows, vocab, seed);
    if (masked) ce_mask(z, rows, vocab, ld, t);
    const Tensor buf = dtype == DType::F64 ? Tensor::from_vector(std::vector<double>(z.begin(), z.end()), {rows, ld},
                                                                 MemCategory::Workspace, Device::cpu())
                                                   .to(ctx.device)
                                           : input_on(ctx, z, rows, ld, dtype);
    const Tensor logits = ld > vocab ? buf.cols(0, vocab) : buf;
    const Tensor targets = Tensor::from_vector(t, {rows}, MemCategory::Workspace, Device::cpu()).to(ctx.device);
    poison_next(ctx.device, {static_cast<size_t>(rows) * sizeof(double)});
    const ops::CrossEntropyResult r = ops::cross_entropy_fused(ctx, logits, targets, grad, grad_scale);
    OpResult count{"count", std::vector<uint8_t>(sizeof(int64_t)), {}};
    std::memcpy(count.bytes.data(), &r.count, sizeof(int64_t));
    // Without the gradient the logits must come back untouched (bytes); with it, the whole buffer, padding included.
    return std::vector<OpResult>{OpResult{"loss", {}, {static_cast<float>(r.loss_sum)}}, count,
                                 grad ? widened_of("dlogits", buf) : bytes_of("logits", buf)};
  };
  c.reference = [=](uint64_t seed) {
    std::vector<float> z = ce_logits(rows, ld, seed);
    const std::vector<int32_t> t = ce_targets(rows, vocab, seed);
    if (masked) ce_mask(z, rows, vocab, ld, t);
    for (float& v : z) v = round_to(dtype, v);
    const float gs = static_cast<float>(grad_scale);
    std::vector<float> g = z;  // the buffer after the op
    double loss = 0.0;
    int64_t count = 0;
    for (int64_t r = 0; r < rows; ++r) {
      float* zr = z.data() + r * ld;
      float* gr = g.data() + r * ld;
      const int32_t target = t[static_cast<size_t>(r)];
      if (target < 0) {
        std::fill_n(gr, vocab, 0.0f);
        continue;
      }
      double mx = -INFINITY, sum = 0.0;
      for (int64_t j = 0; j < vocab; ++j) mx = std::max(mx, static_cast<double>(zr[j]));
      for (int64_t j = 0; j < vocab; ++j) sum += std::exp(zr[j] - mx);
      const double lse = mx + std::log(sum);
      loss += lse - zr[target];
      ++count;
      for (int64_t j = 0; j < vocab; ++j)
        gr[j] = round_to(dtype, static_cast<float>(gs * (std::exp(zr[j] - lse) - (j == target ? 1.0 : 0.0))));
    }
    OpResult cnt{"count", std::vector<uint8_t>(sizeof(int64_t)), {}};
    std::memcpy(cnt.bytes.data(), &count, sizeof(int64_t));
    OpResult buf;
    if (grad) {
      buf = OpResult{"dlogits", {}, g};
    } else {
      buf.name = "logits";
      if (dtype == DType::BF16) {
        std::vector<bf16> b(z.size());
        for (size_t i = 0; i < z.size(); ++i) b[i] = bf16(z[i]);
        buf.bytes.resize(b.size() * sizeof(bf16));
        std::memcpy(buf.bytes.data(), b.data(), buf.bytes.size());
      } else {
        buf.bytes.resize(z.size() * sizeof(float));
        std::memcpy(buf.bytes.data(), z.data(), buf.bytes.size());
      }
    }
    return std::vector<OpResult>{OpResult{"loss", {}, {static_cast<float>(loss)}}, cnt, buf};
  };
  out.push_back(std::move(c));
}

// ---- cross-entropy + top-k distillation ------------------------------------------------------------------------
// The teacher: k distinct tokens per row (a seeded pick), positive probabilities summing to 1.
inline void distill_teacher(int64_t rows, int64_t vocab, int64_t k, uint64_t seed, std::vector<int32_t>& ids,
                            std::vector<float>& probs) {
  std::mt19937_64 gen(seed ^ 0xd15711ULL);
  std::uniform_real_distribution<double> u(0.01, 1.0);
  ids.clear();
  probs.clear();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t first = static_cast<int64_t>(gen() % static_cast<uint64_t>(vocab));
    std::vector<double> w(static_cast<size_t>(k));
    double sum = 0;
    for (double& x : w) sum += x = u(gen);
    for (int64_t j = 0; j < k; ++j) {
      ids.push_back(static_cast<int32_t>((first + j * 7) % vocab));
      probs.push_back(static_cast<float>(w[static_cast<size_t>(j)] / sum));
    }
  }
}

inline void add_distill_case(std::vector<BackendOpCase>& out, int64_t rows, int64_t vocab, int64_t ld, int64_t k,
                             DType dtype, bool grad, double grad_scale, double weight) {
  BackendOpCase c;
  c.op = "cross_entropy_distill";
  c.name = fmt::format("{} [{}x{}]{} k {} w {}{}", dtype_name(dtype), rows, vocab,
                       ld > vocab ? fmt::format(" ld {}", ld) : "", k, weight, grad ? " grad" : " loss only");
  const double bound = dtype == DType::BF16 ? 1e-5 : 1e-8;
  c.cpu = Compare::normalized(bound);
  c.cuda = Compare::normalized(bound);
  c.on_cuda = false;
  c.run = [=](const ExecCtx& ctx, uint64_t seed) {
    std::vector<float> z = ce_logits(rows, ld, seed);
    const Tensor buf = input_on(ctx, z, rows, ld, dtype);
    const Tensor logits = ld > vocab ? buf.cols(0, vocab) : buf;
    const Tensor targets =
        Tensor::from_vector(ce_targets(rows, vocab, seed), {rows}, MemCategory::Workspace, Device::cpu())
            .to(ctx.device);
    std::vector<int32_t> ids;
    std::vector<float> probs;
    distill_teacher(rows, vocab, k, seed, ids, probs);
    const Tensor tid = Tensor::from_vector(ids, {rows, k}, MemCategory::Workspace, Device::cpu()).to(ctx.device);
    const Tensor tp = Tensor::from_vector(probs, {rows, k}, MemCategory::Workspace, Device::cpu()).to(ctx.device);
    poison_next(ctx.device, {static_cast<size_t>(rows) * sizeof(double)});
    const ops::DistillResult r = ops::cross_entropy_distill(ctx, logits, targets, tid, tp, weight, grad, grad_scale);
    OpResult count{"count", std::vector<uint8_t>(sizeof(int64_t)), {}};
    std::memcpy(count.bytes.data(), &r.count, sizeof(int64_t));
    return std::vector<OpResult>{OpResult{"ce", {}, {static_cast<float>(r.ce_sum)}},
                                 OpResult{"kl", {}, {static_cast<float>(r.kl_sum)}}, count,
                                 grad ? widened_of("dlogits", buf) : bytes_of("logits", buf)};
  };
  c.reference = [=](uint64_t seed) {
    std::vector<float> z = ce_logits(rows, ld, seed);
    for (float& v : z) v = round_to(dtype, v);
    const std::vector<int32_t> t = ce_targets(rows, vocab, seed);
    std::vector<int32_t> ids;
    std::vector<float> probs;
    distill_teacher(rows, vocab, k, seed, ids, probs);
    std::vector<float> g = z;
    double ce = 0.0, kl = 0.0;
    int64_t count = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const float* zr = z.data() + r * ld;
      float* gr = g.data() + r * ld;
      const int32_t target = t[static_cast<size_t>(r)];
      if (target < 0) {
        std::fill_n(gr, vocab, 0.0f);
        continue;
      }
      double mx = -INFINITY, sum = 0.0, mass = 0.0;
      for (int64_t j = 0; j < vocab; ++j) mx = std::max(mx, static_cast<double>(zr[j]));
      for (int64_t j = 0; j < vocab; ++j) sum += std::exp(zr[j] - mx);
      const double lse = mx + std::log(sum);
      ce += lse - zr[target];
      ++count;
      std::vector<double> gd(static_cast<size_t>(vocab), 0.0);
      for (int64_t j = 0; j < k; ++j) {
        const double p = probs[static_cast<size_t>(r * k + j)];
        const int32_t id = ids[static_cast<size_t>(r * k + j)];
        kl += p * (std::log(p) - (zr[id] - lse));
        mass += p;
        gd[static_cast<size_t>(id)] -= weight * p;
      }
      gd[static_cast<size_t>(target)] -= 1.0;
      for (int64_t j = 0; j < vocab; ++j)
        gr[j] = round_to(dtype, static_cast<float>(grad_scale * ((1.0 + weight * mass) * std::exp(zr[j] - lse) +
                                                                 gd[static_cast<size_t>(j)])));
    }
    OpResult cnt{"count", std::vector<uint8_t>(sizeof(int64_t)), {}};
    std::memcpy(cnt.bytes.data(), &count, sizeof(int64_t));
    OpResult buf;
    if (grad) {
      buf = OpResult{"dlogits", {}, g};
    } else {
      buf.name = "logits";
      if (dtype == DType::BF16) {
        std::vector<bf16> b(z.size());
        for (size_t i = 0; i < z.size(); ++i) b[i] = bf16(z[i]);
        buf.bytes.resize(b.size() * sizeof(bf16));
        std::memcpy(buf.bytes.data(), b.data(), buf.bytes.size());
      } else {
        buf.bytes.resize(z.size() * sizeof(float));
        std::memcpy(buf.bytes.data(), z.data(), buf.bytes.size());
      }
    }
    return std::vector<OpResult>{OpResult{"ce", {}, {static_cast<float>(ce)}},
                                 OpResult{"kl", {}, {static_cast<float>(kl)}}, cnt, buf};
  };
  out.push_back(std::move(c));
}

// ---- AdamW ----------------------------------------------------------------------------------------------------
struct AdamWInputs {
  std::vector<float> p, g, m, v;
};
inline AdamWInputs adamw_inputs(int64_t n, DType moments, uint64_t seed) {
  AdamWInputs in{random_values(1, n, seed), random_values(1, n, seed + 1), random_values(1, n, seed + 2),
                 random_values(1, n, seed + 3)};
  for (size_t i = 0; i < in.g.size(); ++i) {
    in.g[i] *= 1e-3f;
    in.m[i] = round_to(moments, in.m[i] * 1e-3f);
    in.v[i] = round_to(moments, in.v[i] * in.v[i] * 1e-6f);  // v >= 0
  }
  return in;
}
inline ops::AdamWHyper adamw_hyper(bool decay) {
  ops::AdamWHyper h;
  h.lr = 3e-3;
  h.beta1 = 0.9;
  h.beta2 = 0.95;
  h.eps = 1e-8;
  h.weight_decay = decay ? 0.1 : 0.0;
  h.step = 7;
  return h;
}

inline void add_adamw_case(std::vector<BackendOpCase>& out, int64_t n, DType moments, bool decay) {
  BackendOpCase c;
  c.op = "adamw";
  c.name = fmt::format("n={} moments {}{}", n, dtype_name(moments), decay ? " decay 0.1" : "");
  // FP32 arithmetic (BF16 moments: rounded) against FP64; the CUDA kernel runs the CPU's FP32 expression.
  c.cpu = Compare::normalized(moments == DType::BF16 ? 1e-6 : 1e-10);
  c.cuda = Compare::bits();
  c.run = [=](const ExecCtx& ctx, uint64_t seed) {
    AdamWInputs in = adamw_inputs(n, moments, seed);
    const Tensor p = input_on(ctx, in.p, 1, n, DType::F32).view({n});
    const Tensor g = input_on(ctx, in.g, 1, n, DType::F32).view({n});
    const Tensor m = input_on(ctx, in.m, 1, n, moments).view({n});
    const Tensor v = input_on(ctx, in.v, 1, n, moments).view({n});
    ops::adamw_update(ctx, p, g, m, v, adamw_hyper(decay));
    return std::vector<OpResult>{floats_of("param", p), widened_of("exp_avg", m), widened_of("exp_avg_sq", v),
                                 floats_of("grad", g)};
  };
  c.reference = [=](uint64_t seed) {
    AdamWInputs in = adamw_inputs(n, moments, seed);
    const ops::AdamWHyper h = adamw_hyper(decay);
    const double t = static_cast<double>(h.step);
    const double bias1 = 1.0 - std::pow(h.beta1, t), bias2 = 1.0 - std::pow(h.beta2, t);
    const std::vector<float> g = in.g;
    for (int64_t i = 0; i < n; ++i) {
      const size_t k = static_cast<size_t>(i);
      const double m = h.beta1 * in.m[k] + (1.0 - h.beta1) * g[k];
      const double v = h.beta2 * in.v[k] + (1.0 - h.beta2) * g[k] * static_cast<double>(g[k]);
      const double denom = std::sqrt(v) / std::sqrt(bias2) + h.eps;
      in.p[k] = static_cast<float>(in.p[k] * (1.0 - h.lr * h.weight_decay) - h.lr / bias1 * (m / denom));
      in.m[k] = round_to(moments, static_cast<float>(m));
      in.v[k] = round_to(moments, static_cast<float>(v));
    }
    return std::vector<OpResult>{OpResult{"param", {}, in.p}, OpResult{"exp_avg", {}, in.m},
                                 OpResult{"exp_avg_sq", {}, in.v}, OpResult{"grad", {}, g}};
  };
  out.push_back(std::move(c));
}

// ---- sum of squares -------------------------------------------------------------------------------------------
inline void add_sum_squares_case(std::vector<BackendOpCase>& out, int64_t n, std::vector<int64_t> bounds,
                                 int64_t chunk, DType dtype) {
  const int64_t segments = static_cast<int64_t>(bounds.size()) / 2;
  BackendOpCase c;
  c.op = "sum_squares";
  c.name = fmt::format("{} n={} segments {} chunk {}", dtype_name(dtype), n, segments, chunk);
  c.cpu = Compare::bits();
  c.cuda = Compare::bits();
  c.run = [=](const ExecCtx& ctx, uint64_t seed) {
    const std::vector<float> x = random_values(1, n, seed);
    const Tensor xt = dtype == DType::F64
                          ? Tensor::from_vector(std::vector<double>(x.begin(), x.end()), {n}, MemCategory::Workspace,
                                                Device::cpu())
                                .to(ctx.device)
                          : Tensor::from_vector(x, {n}, MemCategory::Workspace, Device::cpu()).to(ctx.device);
    const Tensor b = Tensor::from_vector(bounds, {segments, 2}, MemCategory::Workspace, Device::cpu()).to(ctx.device);
    poison_next(ctx.device, {static_cast<size_t>(segments) * sizeof(double)});
    const Tensor o = Tensor::empty({segments}, DType::F64, MemCategory::Workspace, ctx.device);
    ops::sum_squares_segments(ctx, xt, b, o, chunk);
    return std::vector<OpResult>{bytes_of("out", o)};
  };
  c.reference = [=](uint64_t seed) {
    const std::vector<float> x = random_values(1, n, seed);
    std::vector<double> o(static_cast<size_t>(segments));
    for (int64_t s = 0; s < segments; ++s) {
      double total = 0.0;
      for (int64_t b = bounds[static_cast<size_t>(2 * s)]; b < bounds[static_cast<size_t>(2 * s + 1)]; b += chunk) {
        const int64_t e = std::min(bounds[static_cast<size_t>(2 * s + 1)], b + chunk);
        double acc = 0.0;
        for (int64_t i = b; i < e; ++i) acc += static_cast<double>(x[static_cast<size_t>(i)]) * x[static_cast<size_t>(i)];
        total += acc;
      }
      o[static_cast<size_t>(s)] = total;
    }
    OpResult r{"out", std::vector<uint8_t>(o.size() * sizeof(double)), {}};
    std::memcpy(r.bytes.data(), o.data(), r.bytes.size());
    return std::vector<OpResult>{r};
  };
  out.push_back(std::move(c));
}

}  // namespace train_detail

inline void train_op_cases(std::vector<BackendOpCase>& out) {
  using train_detail::add_adamw_case;
  using train_detail::add_cross_entropy_case;
  using train_detail::add_sum_squares_case;
  for (DType dt : {DType::F32, DType::BF16})
    for (bool grad : {false, true}) {
      add_cross_entropy_case(out, 7, 1000, 1000, dt, grad, 1.0);            // ragged vocabulary, small CTA
      add_cross_entropy_case(out, 6, 4099, 4099, dt, grad, 1.0 / 37.0);     // odd: scalar rows (stride 4099)
      add_cross_entropy_case(out, 5, 4099, 4104, dt, grad, 0.25);           // strided view, vector rows + tail
      add_cross_entropy_case(out, 3, 70001, 70008, dt, grad, 1.0 / 3.0);    // 512-thread rows, unrolled loop
      // CUDA's one-read kernel (the gradient of aligned rows that fit on the chip) past its registers' part:
      add_cross_entropy_case(out, 3, 32768, 32768, dt, grad, 0.2);  // the benchmark's width, staged
      add_cross_entropy_case(out, 5, 40003, 40008, dt, grad, 0.5);  // strided, ragged staging + tail
      add_cross_entropy_case(out, 2, 65536, 65536, dt, grad, 1.0);  // F32: the most shared memory (H100)
      add_cross_entropy_case(out, 3, 32768, 32768, dt, grad, 0.2, true, /*masked=*/true);  // −inf logits
    }
  add_cross_entropy_case(out, 3, 70001, 70008, DType::F32, true, 1.0, true, /*masked=*/true);  // general kernel
  // BF16 rows too long for the one-read kernel: the general kernel's BF16 gradient.
  add_cross_entropy_case(out, 2, 140001, 140008, DType::BF16, true, 0.5);
  add_cross_entropy_case(out, 4, 300, 300, DType::F64, true, 1.0, /*on_cuda=*/false);  // gradient checks: CPU only
  for (DType dt : {DType::F32, DType::BF16})
    for (bool grad : {false, true}) {
      train_detail::add_distill_case(out, 9, 1000, 1000, 16, dt, grad, 1.0 / 9.0, 0.5);
      train_detail::add_distill_case(out, 5, 4099, 4104, 3, dt, grad, 0.25, 2.0);  // strided view
    }
  for (DType m : {DType::F32, DType::BF16})
    for (bool decay : {false, true}) {
      add_adamw_case(out, 1000, m, decay);    // multiple of 4, not of 128
      add_adamw_case(out, 70003, m, decay);   // n % 4 = 3: vector loop + tail, several CTAs
    }
  add_adamw_case(out, 5, DType::F32, true);  // the tail only
  // Segments: gaps, an empty one, a repeat, one element, a run over every element (many chunks).
  const int64_t n = 10007;
  const std::vector<int64_t> segs = {0, 3500, 3500, 3500, 3600, 7777, 0, 3500, 7777, 10007, 5, 6, 0, n};
  for (DType dt : {DType::F32, DType::F64}) {
    add_sum_squares_case(out, n, segs, 1000, dt);  // a few chunks per segment
    add_sum_squares_case(out, n, segs, 7, dt);     // 1430 chunks over [0, n): several CTAs; chunks < a tile row
    add_sum_squares_case(out, n, segs, 16384, dt); // one chunk per segment
  }
  add_sum_squares_case(out, 70001, {0, 70001, 0, 0, 123, 60000}, ops::kSumSquaresChunk, DType::F32);  // 5 chunks
}

}  // namespace fp8train::backend_test
