// Backend test table rows (backend_ops_table.h) of the router, the sequence balance loss and the MoE plan / permute /
// unpermute. References: the router and the row movements as exact host evaluations in the kernels' own float
// arithmetic (written independently here: full sorts instead of the CPU's partial sort), the balance loss and the
// dot products of unpermute's backward in FP64.
// A GPU plan has more expert-ordered rows than the CPU one (moe_plan_rows: an upper bound, no host sync): the rows
// compare only the first offsets[E] rows of anything laid out by the plan, and the plan rows report a flag that
// every row past offsets[E] is −1 (true on both devices).
// CUDA against the CPU: selection, counts, offsets, slots and moved rows exactly; router scores and gates by a
// 1e-12 normalized bound (the device's exp is not the host's expf bit for bit); balance loss and dot products by a
// bound (another summation order).
#pragma once
#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "backend_ops_table.h"
#include "ops/moe_dispatch.h"
#include "ops/router.h"

namespace fp8train::backend_test {
namespace moe_rows {

inline std::string dt_name(DType d) { return std::string(dtype_name(d)); }

template <class T>
inline OpResult raw_result(const std::string& name, const std::vector<T>& v) {
  OpResult r{name, {}, {}};
  r.bytes.resize(v.size() * sizeof(T));
  std::memcpy(r.bytes.data(), v.data(), r.bytes.size());
  return r;
}

// A matrix on ctx's device: `rows` x `ld` values (BF16-rounded in place when dtype is BF16), returned as the
// [rows, cols] view of the [rows, ld] storage (ld > cols: a strided matrix).
struct Mat {
  Tensor full, view;
};
inline Mat mat_on(const ExecCtx& ctx, std::vector<float>& v, int64_t rows, int64_t cols, int64_t ld, DType dt) {
  Mat m;
  if (dt == DType::F64) {
    const std::vector<double> d(v.begin(), v.end());
    m.full = Tensor::from_vector(d, {rows, ld}, MemCategory::Workspace, Device::cpu()).to(ctx.device);
  } else {
    m.full = input_on(ctx, v, rows, ld, dt);
  }
  m.view = ld > cols ? m.full.cols(0, cols) : m.full;
  return m;
}
inline std::vector<float> nans(int64_t n) {
  return std::vector<float>(static_cast<size_t>(n), std::numeric_limits<float>::quiet_NaN());
}

// The first `rows` rows and `cols` columns of a contiguous [·, ld] matrix, as bytes.
inline OpResult sliced_bytes(const std::string& name, const Tensor& full, int64_t rows, int64_t cols) {
  const OpResult all = bytes_of(name, full);
  const size_t es = dtype_size(full.dtype()), ld = static_cast<size_t>(full.size(1));
  OpResult r{name, {}, {}};
  for (int64_t i = 0; i < rows; ++i) {
    const uint8_t* p = all.bytes.data() + static_cast<size_t>(i) * ld * es;
    r.bytes.insert(r.bytes.end(), p, p + static_cast<size_t>(cols) * es);
  }
  return r;
}
// Host values of `rows` x `cols` in dtype dt's bytes (BF16: rounded to nearest even).
inline OpResult values_bytes(const std::string& name, const std::vector<float>& v, DType dt) {
  if (dt == DType::BF16) {
    std::vector<bf16> b(v.size());
    for (size_t i = 0; i < v.size(); ++i) b[i] = bf16(v[i]);
    return raw_result(name, b);
  }
  return raw_result(name, v);
}
inline float rounded(float v, DType dt) { return dt == DType::BF16 ? static_cast<float>(bf16(v)) : v; }

// K distinct experts per token, `skip` (if >= 0) never chosen: that expert gets zero tokens.
inline std::vector<int32_t> random_selection(int64_t n, int64_t k, int64_t e, uint64_t seed, int64_t skip) {
  std::mt19937_64 gen(seed);
  std::vector<int32_t> all, sel;
  for (int32_t i = 0; i < e; ++i)
    if (i != skip) all.push_back(i);
  for (int64_t t = 0; t < n; ++t) {
    std::shuffle(all.begin(), all.end(), gen);
    sel.insert(sel.end(), all.begin(), all.begin() + k);
  }
  return sel;
}

struct RefPlan {
  std::vector<int32_t> offsets, slot_token, choice_slot;
};
inline RefPlan ref_plan(const std::vector<int32_t>& sel, int64_t n, int64_t k, int64_t e, int64_t align) {
  RefPlan p;
  p.offsets.assign(static_cast<size_t>(e + 1), 0);
  for (int64_t x = 0; x < e; ++x) {
    const int64_t c = std::count(sel.begin(), sel.end(), static_cast<int32_t>(x));
    p.offsets[x + 1] = p.offsets[x] + static_cast<int32_t>((c + align - 1) / align * align);
  }
  p.slot_token.assign(static_cast<size_t>(p.offsets[e]), -1);
  p.choice_slot.assign(sel.size(), -1);
  for (int64_t x = 0; x < e; ++x) {  // expert by expert, its pairs in token order
    int32_t j = p.offsets[x];
    for (int64_t t = 0; t < n; ++t)
      for (int64_t c = 0; c < k; ++c)
        if (sel[t * k + c] == x) {
          p.slot_token[j] = static_cast<int32_t>(t);
          p.choice_slot[t * k + c] = j++;
        }
  }
  return p;
}

struct PlanSetup {
  int64_t n, k, e, align;
  int64_t skip = -1;  // an expert with no tokens
  std::string str() const {
    return fmt::format("N={} K={} E={} align={}{}", n, k, e, align, skip >= 0 ? " (one expert empty)" : "");
  }
  int64_t cap() const { return ops::moe_plan_rows(n, k, e, align); }
};

inline ops::MoePlan plan_on(const ExecCtx& ctx, const PlanSetup& s, const std::vector<int32_t>& sel) {
  const Tensor st = Tensor::from_vector(sel, {s.n, s.k}, MemCategory::Workspace, Device::cpu()).to(ctx.device);
  return ops::moe_build_plan(ctx, st, s.e, s.align);
}
inline int32_t plan_used_rows(const ops::MoePlan& plan) {
  return plan.expert_offsets.to_vector<int32_t>()[static_cast<size_t>(plan.n_experts)];
}

// Logits of a sane range (|x| < ~12: no score rounds to 0, few to 1) from random_values' six decades.
inline float compressed(float x) { return std::copysign(1.5f * std::log1p(std::fabs(x)), x); }

// ---- router --------------------------------------------------------------------------------------------------
struct RouterSetup {
  int64_t tokens, e, k, n_group, topk_group;
  double scale = 2.5;
  ops::RouterConfig config() const { return {k, n_group, topk_group, scale}; }
  std::string str() const {
    return fmt::format("tokens={} E={} K={} groups={}/{} scale={}", tokens, e, k, topk_group, n_group, scale);
  }
};

// Logits with ties: on every third token the odd experts repeat their even neighbour's logit, and the bias
// repeats in pairs, so equal keys occur (the lower index must win).
inline std::vector<float> router_logits(const RouterSetup& s, uint64_t seed) {
  std::vector<float> v = random_values(s.tokens, s.e, seed);
  for (auto& x : v) x = compressed(x);
  for (int64_t t = 0; t < s.tokens; t += 3)
    for (int64_t i = 1; i < s.e; i += 2) v[t * s.e + i] = v[t * s.e + i - 1];
  return v;
}
inline std::vector<float> router_bias(const RouterSetup& s, uint64_t seed) {
  std::vector<float> b = random_values(1, s.e, seed);
  for (int64_t i = 0; i < s.e; ++i) b[i] = i % 2 ? b[i - 1] : 0.05f * compressed(b[i]);
  return b;
}

// The router in T arithmetic, written from the formulas (ops/router.h) with full sorts.
template <class T>
std::vector<OpResult> router_reference(const RouterSetup& s, const std::vector<float>& logits,
                                       const std::vector<float>& bias) {
  const int64_t E = s.e, K = s.k, gs = E / s.n_group;
  std::vector<T> scores(static_cast<size_t>(s.tokens * E)), gates(static_cast<size_t>(s.tokens * K));
  std::vector<int32_t> sel(static_cast<size_t>(s.tokens * K)), counts(static_cast<size_t>(E), 0);
  for (int64_t t = 0; t < s.tokens; ++t) {
    std::vector<T> key(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) {
      const T l = static_cast<T>(logits[t * E + e]);
      scores[t * E + e] = T(1) / (T(1) + std::exp(-l));
      key[e] = scores[t * E + e] + static_cast<T>(bias[e]);
    }
    auto order = [](const std::vector<T>& k) {
      return [&k](int32_t a, int32_t b) { return k[a] > k[b] || (k[a] == k[b] && a < b); };
    };
    std::vector<int32_t> cand;
    if (s.n_group > 1) {
      std::vector<T> gkey(static_cast<size_t>(s.n_group));
      for (int64_t g = 0; g < s.n_group; ++g) {
        std::vector<T> m(key.begin() + g * gs, key.begin() + (g + 1) * gs);
        std::sort(m.begin(), m.end(), std::greater<T>());
        gkey[g] = gs >= 2 ? m[0] + m[1] : m[0];
      }
      std::vector<int32_t> groups(static_cast<size_t>(s.n_group));
      std::iota(groups.begin(), groups.end(), 0);
      std::stable_sort(groups.begin(), groups.end(), order(gkey));
      for (int64_t i = 0; i < s.topk_group; ++i)
        for (int64_t e = groups[i] * gs; e < (groups[i] + 1) * gs; ++e) cand.push_back(static_cast<int32_t>(e));
    } else {
      cand.resize(static_cast<size_t>(E));
      std::iota(cand.begin(), cand.end(), 0);
    }
    std::sort(cand.begin(), cand.end(), order(key));
    T sum = 0;
    for (int64_t k = 0; k < K; ++k) sum += scores[t * E + cand[k]];
    const T factor = static_cast<T>(s.scale) / sum;
    for (int64_t k = 0; k < K; ++k) {
      sel[t * K + k] = cand[k];
      gates[t * K + k] = scores[t * E + cand[k]] * factor;
      ++counts[cand[k]];
    }
  }
  auto out = [](const std::string& name, const std::vector<T>& v) {
    return OpResult{name, {}, std::vector<float>(v.begin(), v.end())};
  };
  return {out("scores", scores), raw_result("selected", sel), out("gates", gates), raw_result("expert_counts", counts)};
}

inline void add_router_forward(std::vector<BackendOpCase>& out, const RouterSetup& s, DType dt) {
  BackendOpCase c;
  c.op = "router_forward";
  c.name = s.str() + " " + dt_name(dt);
  c.cpu = Compare::bits();
  c.cuda = Compare::normalized(1e-12);  // scores, gates; selected and counts are bytes (exact)
  c.on_cuda = dt == DType::F32;
  c.run = [=](const ExecCtx& ctx, uint64_t seed) {
    std::vector<float> l = router_logits(s, seed), b = router_bias(s, seed + 1);
    const Tensor logits = mat_on(ctx, l, s.tokens, s.e, s.e, dt).full;
    const Tensor bias = Tensor::from_vector(b, {s.e}, MemCategory::Workspace, Device::cpu()).to(ctx.device);
    const size_t es = dtype_size(dt);
    poison_next(ctx.device, {static_cast<size_t>(s.tokens * s.e) * es, static_cast<size_t>(s.tokens * s.k) * 4,
                             static_cast<size_t>(s.tokens * s.k) * es, static_cast<size_t>(s.e) * 4});
    const ops::RouterOutputs r = ops::router_forward(ctx, logits, bias, s.config());
    auto f = [&](const std::string& name, const Tensor& t) {
      if (dt == DType::F64) {
        const std::vector<double> d = t.to(Device::cpu()).to_vector<double>();
        return OpResult{name, {}, std::vector<float>(d.begin(), d.end())};
      }
      return floats_of(name, t);
    };
    return std::vector<OpResult>{f("scores", r.scores), bytes_of("selected", r.selected), f("gates", r.gates),
                                 bytes_of("expert_counts", r.expert_counts)};
  };
  c.reference = [=](uint64_t seed) {
    const std::vector<float> l = router_logits(s, seed), b = router_bias(s, seed + 1);
    return dt == DType::F64 ? router_reference<double>(s, l, b) : router_reference<float>(s, l, b);
  };
  out.push_back(std::move(c));
}

// Scores in (0, 1) from logits; the selection K distinct experts per token.
inline std::vector<float> sigmoid_scores(int64_t n, int64_t e, uint64_t seed) {
  std::vector<float> v = random_values(n, e, seed);
  for (auto& x : v) x = 1.0f / (1.0f + std::exp(-compressed(x)));
  return v;
}

inline void add_router_backward(std::vector<BackendOpCase>& out, int64_t tokens, int64_t e, int64_t k, bool extra) {
  BackendOpCase c;
  c.op = "router_backward";
  c.name = fmt::format("tokens={} E={} K={}{} f32", tokens, e, k, extra ? " + dscores_extra" : "");
  c.cpu = Compare::bits();
  c.cuda = Compare::bits();  // the CPU's float expression, element by element
  const double scale = 2.5;
  c.run = [=](const ExecCtx& ctx, uint64_t seed) {
    std::vector<float> s = sigmoid_scores(tokens, e, seed), dg = random_values(tokens, k, seed + 2),
                       dx = random_values(tokens, e, seed + 3), dl = nans(tokens * e);
    const std::vector<int32_t> sel = random_selection(tokens, k, e, seed + 1, -1);
    const Tensor ts = input_on(ctx, s, tokens, e, DType::F32), tdg = input_on(ctx, dg, tokens, k, DType::F32);
    const Tensor tsel = Tensor::from_vector(sel, {tokens, k}, MemCategory::Workspace, Device::cpu()).to(ctx.device);
    const Tensor tdx = extra ? input_on(ctx, dx, tokens, e, DType::F32) : Tensor();
    const Tensor tdl = input_on(ctx, dl, tokens, e, DType::F32);
    ops::router_backward(ctx, ts, tsel, tdg, tdx, {k, 1, 1, scale}, tdl);
    return std::vector<OpResult>{floats_of("dlogits", tdl)};
  };
  c.reference = [=](uint64_t seed) {
    const std::vector<float> s = sigmoid_scores(tokens, e, seed), dg = random_values(tokens, k, seed + 2),
                             dx = random_values(tokens, e, seed + 3);
    const std::vector<int32_t> sel = random_selection(tokens, k, e, seed + 1, -1);
    std::vector<float> dl(static_cast<size_t>(tokens * e));
    const float r = static_cast<float>(scale);
    for (int64_t t = 0; t < tokens; ++t) {
      float sum = 0, w = 0;
      for (int64_t j = 0; j < k; ++j) {
        sum += s[t * e + sel[t * k + j]];
        w += dg[t * k + j] * s[t * e + sel[t * k + j]];
      }
      for (int64_t i = 0; i < e; ++i) {
        float d = extra ? dx[t * e + i] : 0.0f;
        for (int64_t j = 0; j < k; ++j)
          if (sel[t * k + j] == i) d += r / sum * (dg[t * k + j] - w / sum);
        const float si = s[t * e + i];
        dl[t * e + i] = d * (si * (1.0f - si));
      }
    }
    return std::vector<OpResult>{{"dlogits", {}, dl}};
  };
  out.push_back(std::move(c));
}

// ---- sequence balance loss -------------------------------------------------------------------------------------
struct BalanceSetup {
  int64_t batch, seq, e, k;
  double alpha = 0.003;
  std::string str() const { return fmt::format("batch={} seq={} E={} K={} f32", batch, seq, e, k); }
};
// FP64: f_{b,i}, S_t and the loss from the formulas of ops/router.h.
inline double balance_reference(const BalanceSetup& s, const std::vector<float>& sc, const std::vector<int32_t>& sel,
                                std::vector<double>* grad, double dloss) {
  double loss = 0;
  for (int64_t b = 0; b < s.batch; ++b) {
    std::vector<double> f(static_cast<size_t>(s.e), 0.0), P(static_cast<size_t>(s.e), 0.0);
    for (int64_t t = b * s.seq; t < (b + 1) * s.seq; ++t)
      for (int64_t j = 0; j < s.k; ++j) f[sel[t * s.k + j]] += static_cast<double>(s.e) / (s.k * s.seq);
    for (int64_t t = b * s.seq; t < (b + 1) * s.seq; ++t) {
      double S = 0, fs = 0;
      for (int64_t i = 0; i < s.e; ++i) {
        S += sc[t * s.e + i];
        fs += f[i] * sc[t * s.e + i];
      }
      for (int64_t i = 0; i < s.e; ++i) {
        P[i] += sc[t * s.e + i] / S / s.seq;
        if (grad) (*grad)[t * s.e + i] = dloss * s.alpha / (s.batch * s.seq) * (f[i] / S - fs / (S * S));
      }
    }
    for (int64_t i = 0; i < s.e; ++i) loss += s.alpha * f[i] * P[i] / s.batch;
  }
  return loss;
}

inline void add_balance_rows(std::vector<BackendOpCase>& out, const BalanceSetup& s) {
  const int64_t n = s.batch * s.seq;
  {
    BackendOpCase c;
    c.op = "balance_loss_forward";
    c.name = s.str();
    c.cpu = Compare::normalized(1e-13);  // the loss rounded to float: the FP64 sums agree far below that
    c.cuda = Compare::normalized(1e-13);
    c.run = [=](const ExecCtx& ctx, uint64_t seed) {
      std::vector<float> sc = sigmoid_scores(n, s.e, seed);
      const std::vector<int32_t> sel = random_selection(n, s.k, s.e, seed + 1, 1);
      const Tensor ts = input_on(ctx, sc, n, s.e, DType::F32);
      const Tensor tsel = Tensor::from_vector(sel, {n, s.k}, MemCategory::Workspace, Device::cpu()).to(ctx.device);
      const double loss = ops::seq_balance_loss(ctx, ts, tsel, s.batch, s.alpha);
      return std::vector<OpResult>{{"loss", {}, {static_cast<float>(loss)}}};
    };
    c.reference = [=](uint64_t seed) {
      const std::vector<float> sc = sigmoid_scores(n, s.e, seed);
      const std::vector<int32_t> sel = random_selection(n, s.k, s.e, seed + 1, 1);
      return std::vector<OpResult>{{"loss", {}, {static_cast<float>(balance_reference(s, sc, sel, nullptr, 0))}}};
    };
    out.push_back(std::move(c));
  }
  {
    BackendOpCase c;
    c.op = "balance_loss_backward";
    c.name = s.str() + " dscores +=";
    c.cpu = Compare::normalized(1e-12);
    c.cuda = Compare::normalized(1e-12);  // FP64 sums in another order, rounded to float
    const double dloss = 0.7;
    c.run = [=](const ExecCtx& ctx, uint64_t seed) {
      std::vector<float> sc = sigmoid_scores(n, s.e, seed), d0 = random_values(n, s.e, seed + 2);
      for (auto& x : d0) x *= 1e-4f;
      const std::vector<int32_t> sel = random_selection(n, s.k, s.e, seed + 1, 1);
      const Tensor ts = input_on(ctx, sc, n, s.e, DType::F32), td = input_on(ctx, d0, n, s.e, DType::F32);
      const Tensor tsel = Tensor::from_vector(sel, {n, s.k}, MemCategory::Workspace, Device::cpu()).to(ctx.device);
      ops::seq_balance_loss_backward(ctx, ts, tsel, s.batch, s.alpha, dloss, td);
      return std::vector<OpResult>{floats_of("dscores", td)};
    };
    c.reference = [=](uint64_t seed) {
      std::vector<float> sc = sigmoid_scores(n, s.e, seed), d0 = random_values(n, s.e, seed + 2);
      for (auto& x : d0) x *= 1e-4f;
      const std::vector<int32_t> sel = random_selection(n, s.k, s.e, seed + 1, 1);
      std::vector<double> g(static_cast<size_t>(n * s.e));
      balance_reference(s, sc, sel, &g, dloss);
      std::vector<float> d(d0.size());
      for (size_t i = 0; i < d.size(); ++i) d[i] = static_cast<float>(d0[i] + g[i]);
      return std::vector<OpResult>{{"dscores", {}, d}};
    };
    out.push_back(std::move(c));
  }
}

// ---- plan ------------------------------------------------------------------------------------------------------
inline void add_plan_row(std::vector<BackendOpCase>& out, const PlanSetup& s) {
  BackendOpCase c;
  c.op = "moe_build_plan";
  c.name = s.str();
  c.run = [=](const ExecCtx& ctx, uint64_t seed) {
    const std::vector<int32_t> sel = random_selection(s.n, s.k, s.e, seed, s.skip);
    poison_next(ctx.device, {static_cast<size_t>(s.e + 1) * 4, static_cast<size_t>(s.cap()) * 4,
                             static_cast<size_t>(s.n * s.k) * 4});
    const ops::MoePlan plan = plan_on(ctx, s, sel);
    const std::vector<int32_t> off = plan.expert_offsets.to_vector<int32_t>();
    const std::vector<int32_t> slot = plan.slot_token.to_vector<int32_t>();
    const int32_t used = off.back();
    // every row past offsets[E] is −1 (the GPU plan's spare capacity), and the capacity holds the used rows
    bool spare_ok = plan.rows >= used && static_cast<int64_t>(slot.size()) == plan.rows;
    for (int64_t j = used; j < plan.rows && spare_ok; ++j) spare_ok = slot[j] == -1;
    return std::vector<OpResult>{
        raw_result("expert_offsets", off), bytes_of("choice_slot", plan.choice_slot),
        raw_result("slot_token",
                   std::vector<int32_t>(slot.begin(), slot.begin() + std::min<int64_t>(used, slot.size()))),
        raw_result("spare rows are -1", std::vector<uint8_t>{static_cast<uint8_t>(spare_ok)})};
  };
  c.reference = [=](uint64_t seed) {
    const RefPlan p = ref_plan(random_selection(s.n, s.k, s.e, seed, s.skip), s.n, s.k, s.e, s.align);
    return std::vector<OpResult>{raw_result("expert_offsets", p.offsets), raw_result("choice_slot", p.choice_slot),
                                 raw_result("slot_token", p.slot_token),
                                 raw_result("spare rows are -1", std::vector<uint8_t>{1})};
  };
  out.push_back(std::move(c));
}

// ---- permute / unpermute ---------------------------------------------------------------------------------------
struct RowsSetup {
  PlanSetup plan;
  int64_t dim, ld_tok, ld_exp;  // row strides of the token- and expert-ordered matrices (>= dim)
  DType dt;
  std::string str() const {
    return fmt::format("{} dim={}{}{} {}", plan.str(), dim, ld_tok > dim ? fmt::format(" ld_x={}", ld_tok) : "",
                       ld_exp > dim ? fmt::format(" ld_xp={}", ld_exp) : "", dtype_name(dt));
  }
};

// Expert-ordered input values: drawn for the GPU capacity so that both devices see the same leading rows.
inline std::vector<float> expert_values(const RowsSetup& s, uint64_t seed) {
  std::vector<float> v = random_values(s.plan.cap(), s.ld_exp, seed);
  for (auto& x : v) x = rounded(x, s.dt);
  return v;
}
inline std::vector<float> token_values(const RowsSetup& s, uint64_t seed) {
  std::vector<float> v = random_values(s.plan.n, s.ld_tok, seed);
  for (auto& x : v) x = rounded(x, s.dt);
  return v;
}
inline std::vector<float> gate_values(const RowsSetup& s, uint64_t seed) {
  std::vector<float> g = random_values(s.plan.n, s.plan.k, seed);
  for (auto& x : g) x *= 0.1f;
  return g;
}
// The expert-ordered input as the op sees it: the plan's rows of the drawn values.
inline Mat expert_on(const ExecCtx& ctx, const RowsSetup& s, const ops::MoePlan& plan, uint64_t seed) {
  std::vector<float> v = expert_values(s, seed);
  v.resize(static_cast<size_t>(plan.rows * s.ld_exp));
  return mat_on(ctx, v, plan.rows, s.dim, s.ld_exp, s.dt);
}

inline void add_permute_row(std::vector<BackendOpCase>& out, const RowsSetup& s) {
  BackendOpCase c;
  c.op = "moe_permute";
  c.name = s.str();
  c.on_cuda = true;  // a row gather: every element size
  c.run = [=](const ExecCtx& ctx, uint64_t seed) {
    std::vector<float> x = token_values(s, seed);
    const ops::MoePlan plan =
        plan_on(ctx, s.plan, random_selection(s.plan.n, s.plan.k, s.plan.e, seed + 1, s.plan.skip));
    const Mat tx = mat_on(ctx, x, s.plan.n, s.dim, s.ld_tok, s.dt);
    std::vector<float> init = nans(plan.rows * s.ld_exp);
    const Mat xp = mat_on(ctx, init, plan.rows, s.dim, s.ld_exp, s.dt);
    ops::moe_permute(ctx, tx.view, plan, xp.view);
    return std::vector<OpResult>{sliced_bytes("xp", xp.full, plan_used_rows(plan), s.dim)};
  };
  c.reference = [=](uint64_t seed) {
    const std::vector<float> x = token_values(s, seed);
    const RefPlan p = ref_plan(random_selection(s.plan.n, s.plan.k, s.plan.e, seed + 1, s.plan.skip), s.plan.n,
                               s.plan.k, s.plan.e, s.plan.align);
    std::vector<float> xp(p.slot_token.size() * static_cast<size_t>(s.dim), 0.0f);
    for (size_t j = 0; j < p.slot_token.size(); ++j)
      if (p.slot_token[j] >= 0)
        for (int64_t d = 0; d < s.dim; ++d) xp[j * s.dim + d] = x[p.slot_token[j] * s.ld_tok + d];
    if (s.dt == DType::F64) {
      const std::vector<double> d(xp.begin(), xp.end());
      return std::vector<OpResult>{raw_result("xp", d)};
    }
    return std::vector<OpResult>{values_bytes("xp", xp, s.dt)};
  };
  out.push_back(std::move(c));
}

// Quantized dispatch: 1x128 E4M3 codes and their scales move together.
inline void add_permute_quantized_row(std::vector<BackendOpCase>& out, const PlanSetup& ps, int64_t dim) {
  BackendOpCase c;
  c.op = "moe_permute";
  c.name = ps.str() + fmt::format(" dim={} quantized e4m3 1x128", dim);
  const quant::QuantSpec spec = detail::make_spec(quant::Format::E4M3, quant::Granularity::tile_1x128(), false);
  c.run = [=](const ExecCtx& ctx, uint64_t seed) {
    std::vector<float> x = random_values(ps.n, dim, seed);
    const ops::MoePlan plan = plan_on(ctx, ps, random_selection(ps.n, ps.k, ps.e, seed + 1, ps.skip));
    const quant::QTensor xq = ops::quantize(ctx, input_on(ctx, x, ps.n, dim, DType::F32), spec);
    const int64_t sc = (dim + 127) / 128;
    poison_next(ctx.device, {static_cast<size_t>(plan.rows * dim), static_cast<size_t>(plan.rows * sc) * 4});
    const quant::QTensor q = ops::moe_permute(ctx, xq, plan);
    const int32_t used = plan_used_rows(plan);
    const OpResult codes = sliced_bytes("codes", q.rowwise.codes.view({plan.rows, dim}), used, dim);
    OpResult scales = sliced_bytes("scales", q.rowwise.scales.view({plan.rows, sc}), used, sc);
    return std::vector<OpResult>{codes, scales};
  };
  c.reference = [=](uint64_t seed) {
    const std::vector<float> x = random_values(ps.n, dim, seed);
    const quant::QTensor xq = quant::quantize(x, ps.n, dim, spec);
    const RefPlan p = ref_plan(random_selection(ps.n, ps.k, ps.e, seed + 1, ps.skip), ps.n, ps.k, ps.e, ps.align);
    const int64_t sc = (dim + 127) / 128;
    const auto* codes = static_cast<const uint8_t*>(xq.rowwise.codes.raw());
    const auto* scales = static_cast<const float*>(xq.rowwise.scales.raw());
    std::vector<uint8_t> qc(p.slot_token.size() * static_cast<size_t>(dim), 0);
    std::vector<float> qs(p.slot_token.size() * static_cast<size_t>(sc), 0.0f);
    for (size_t j = 0; j < p.slot_token.size(); ++j)
      if (p.slot_token[j] >= 0) {
        std::copy_n(codes + p.slot_token[j] * dim, dim, qc.begin() + static_cast<int64_t>(j) * dim);
        std::copy_n(scales + p.slot_token[j] * sc, sc, qs.begin() + static_cast<int64_t>(j) * sc);
      }
    return std::vector<OpResult>{raw_result("codes", qc), raw_result("scales", qs)};
  };
  out.push_back(std::move(c));
}

// permute backward (gated = false): dx[t] (+)= Σ_k dxp[slot];  unpermute (gated): y[t] (+)= Σ_k g·yp[slot].
inline void add_combine_row(std::vector<BackendOpCase>& out, const RowsSetup& s, bool gated, bool accumulate) {
  BackendOpCase c;
  c.op = gated ? "moe_unpermute" : "moe_permute_backward";
  c.name = s.str() + (accumulate ? " +=" : "");
  c.on_cuda = s.dt != DType::F64;
  c.run = [=](const ExecCtx& ctx, uint64_t seed) {
    const ops::MoePlan plan =
        plan_on(ctx, s.plan, random_selection(s.plan.n, s.plan.k, s.plan.e, seed + 1, s.plan.skip));
    const Mat src = expert_on(ctx, s, plan, seed);
    std::vector<float> y0 = accumulate ? token_values(s, seed + 2) : nans(s.plan.n * s.ld_tok);
    const Mat y = mat_on(ctx, y0, s.plan.n, s.dim, s.ld_tok, s.dt);
    if (gated) {
      std::vector<float> g = gate_values(s, seed + 3);
      const Tensor tg = s.dt == DType::F64 ? mat_on(ctx, g, s.plan.n, s.plan.k, s.plan.k, DType::F64).full
                                           : input_on(ctx, g, s.plan.n, s.plan.k, DType::F32);
      ops::moe_unpermute(ctx, src.view, plan, tg.view({s.plan.n * s.plan.k}), y.view, accumulate);
    } else {
      ops::moe_permute_backward(ctx, src.view, plan, y.view, accumulate);
    }
    return std::vector<OpResult>{sliced_bytes("y", y.full, s.plan.n, s.dim)};
  };
  c.reference = [=](uint64_t seed) {
    const std::vector<float> src = expert_values(s, seed), g = gate_values(s, seed + 3);
    const std::vector<float> y0 = token_values(s, seed + 2);
    const RefPlan p = ref_plan(random_selection(s.plan.n, s.plan.k, s.plan.e, seed + 1, s.plan.skip), s.plan.n,
                               s.plan.k, s.plan.e, s.plan.align);
    std::vector<float> y(static_cast<size_t>(s.plan.n * s.dim));
    std::vector<double> yd(y.size());
    for (int64_t t = 0; t < s.plan.n; ++t)
      for (int64_t d = 0; d < s.dim; ++d) {
        float acc = accumulate ? y0[t * s.ld_tok + d] : 0.0f;  // the compute type's sum over k in order
        double accd = acc;
        for (int64_t k = 0; k < s.plan.k; ++k) {
          const float v = src[p.choice_slot[t * s.plan.k + k] * s.ld_exp + d];
          if (gated) {
            const float prod = g[t * s.plan.k + k] * v;
            acc += prod;
            accd += static_cast<double>(g[t * s.plan.k + k]) * v;
          } else {
            acc += v;
            accd += v;
          }
        }
        y[t * s.dim + d] = rounded(acc, s.dt);
        yd[t * s.dim + d] = accd;
      }
    if (s.dt == DType::F64) return std::vector<OpResult>{raw_result("y", yd)};
    return std::vector<OpResult>{values_bytes("y", y, s.dt)};
  };
  out.push_back(std::move(c));
}

inline void add_unpermute_backward_row(std::vector<BackendOpCase>& out, const RowsSetup& s) {
  BackendOpCase c;
  c.op = "moe_unpermute_backward";
  c.name = s.str();
  c.cpu = Compare::normalized(1e-9);   // dgates: FP32 dot products against FP64 (dyp rows are bytes: exact)
  c.cuda = Compare::normalized(1e-9);  // dgates: another summation order
  c.on_cuda = s.dt != DType::F64;
  c.run = [=](const ExecCtx& ctx, uint64_t seed) {
    const ops::MoePlan plan =
        plan_on(ctx, s.plan, random_selection(s.plan.n, s.plan.k, s.plan.e, seed + 1, s.plan.skip));
    const Mat yp = expert_on(ctx, s, plan, seed);
    std::vector<float> dy = token_values(s, seed + 2), g = gate_values(s, seed + 3);
    const Mat tdy = mat_on(ctx, dy, s.plan.n, s.dim, s.ld_tok, s.dt);
    const DType cdt = compute_dtype(s.dt);
    const Tensor tg = mat_on(ctx, g, s.plan.n * s.plan.k, 1, 1, cdt).full.view({s.plan.n * s.plan.k});
    std::vector<float> init = nans(plan.rows * s.ld_exp), ginit = nans(s.plan.n * s.plan.k);
    const Mat dyp = mat_on(ctx, init, plan.rows, s.dim, s.ld_exp, s.dt);
    const Tensor dg = mat_on(ctx, ginit, s.plan.n * s.plan.k, 1, 1, cdt).full.view({s.plan.n * s.plan.k});
    ops::moe_unpermute_backward(ctx, tdy.view, yp.view, plan, tg, dyp.view, dg);
    std::vector<float> dgv;
    if (cdt == DType::F64) {
      const std::vector<double> d = dg.to(Device::cpu()).to_vector<double>();
      dgv.assign(d.begin(), d.end());
    } else {
      dgv = dg.to(Device::cpu()).to_vector<float>();
    }
    return std::vector<OpResult>{sliced_bytes("dyp", dyp.full, plan_used_rows(plan), s.dim), {"dgates", {}, dgv}};
  };
  c.reference = [=](uint64_t seed) {
    const std::vector<float> yp = expert_values(s, seed), dy = token_values(s, seed + 2), g = gate_values(s, seed + 3);
    const RefPlan p = ref_plan(random_selection(s.plan.n, s.plan.k, s.plan.e, seed + 1, s.plan.skip), s.plan.n,
                               s.plan.k, s.plan.e, s.plan.align);
    const int64_t used = static_cast<int64_t>(p.slot_token.size());
    std::vector<float> dyp(static_cast<size_t>(used * s.dim), std::numeric_limits<float>::quiet_NaN());
    std::vector<double> dypd(dyp.size(), std::numeric_limits<double>::quiet_NaN());
    std::vector<float> dg(static_cast<size_t>(s.plan.n * s.plan.k));
    for (int64_t t = 0; t < s.plan.n; ++t)
      for (int64_t k = 0; k < s.plan.k; ++k) {
        const int64_t j = p.choice_slot[t * s.plan.k + k];
        double dot = 0;
        for (int64_t d = 0; d < s.dim; ++d) {
          const float dv = dy[t * s.ld_tok + d];
          dot += static_cast<double>(dv) * yp[j * s.ld_exp + d];
          dyp[j * s.dim + d] = rounded(g[t * s.plan.k + k] * dv, s.dt);
          dypd[j * s.dim + d] = static_cast<double>(g[t * s.plan.k + k]) * dv;
        }
        dg[t * s.plan.k + k] = static_cast<float>(dot);
      }
    if (s.dt == DType::F64) return std::vector<OpResult>{raw_result("dyp", dypd), {"dgates", {}, dg}};
    return std::vector<OpResult>{values_bytes("dyp", dyp, s.dt), {"dgates", {}, dg}};
  };
  out.push_back(std::move(c));
}

}  // namespace moe_rows

inline void moe_op_cases(std::vector<BackendOpCase>& out) {
  using namespace moe_rows;
  // router: plain top-K and group-limited (DeepSeek-V3's node-limited form); F64 is the CPU's only
  add_router_forward(out, {45, 8, 2, 1, 1}, DType::F32);
  add_router_forward(out, {37, 64, 6, 8, 3}, DType::F32);
  add_router_forward(out, {29, 256, 8, 8, 4}, DType::F32);
  add_router_forward(out, {19, 16, 3, 16, 4}, DType::F32);    // one expert a group: the group key is its key
  add_router_forward(out, {9, 1024, 16, 32, 8}, DType::F32);  // the CUDA kernel's largest E
  add_router_forward(out, {13, 64, 6, 8, 3}, DType::F64);
  add_router_backward(out, 45, 8, 2, false);
  add_router_backward(out, 37, 64, 6, true);
  add_balance_rows(out, {3, 37, 64, 6});
  add_balance_rows(out, {1, 50, 8, 2});
  // plans: one tile and several (4096 pairs a tile), align 1 and 128, an expert without tokens
  for (int64_t align : {1, 128}) {
    add_plan_row(out, {45, 6, 20, align, 3});
    add_plan_row(out, {1100, 8, 64, align, 5});
  }
  add_plan_row(out, {300, 2, 8, 16});
  add_plan_row(out, {4099, 8, 256, 128, 200});  // DeepSeek-V3's 256 experts, 9 tiles (the last one partial)
  const PlanSetup small{45, 6, 20, 128, 3}, plain{37, 2, 8, 1, -1};
  for (DType dt : {DType::F32, DType::BF16}) {
    // 16-byte rows, ragged rows, strided rows
    add_permute_row(out, {small, 256, 256, 256, dt});
    add_permute_row(out, {plain, 203, 203, 203, dt});
    add_permute_row(out, {small, 200, 264, 216, dt});
    for (bool gated : {false, true})
      for (bool acc : {false, true}) {
        add_combine_row(out, {small, 256, 256, 256, dt}, gated, acc);
        add_combine_row(out, {plain, 203, 211, 205, dt}, gated, acc);
      }
    add_unpermute_backward_row(out, {small, 256, 256, 256, dt});
    add_unpermute_backward_row(out, {plain, 203, 209, 207, dt});
  }
  add_permute_row(out, {plain, 65, 65, 65, DType::F64});
  add_combine_row(out, {plain, 33, 33, 33, DType::F64}, true, false);
  add_combine_row(out, {plain, 33, 33, 33, DType::F64}, false, true);
  add_unpermute_backward_row(out, {plain, 33, 33, 33, DType::F64});
  add_permute_quantized_row(out, small, 384);
  add_permute_quantized_row(out, plain, 256);
}

}  // namespace fp8train::backend_test
