// Training-step speed of the DeepSeek-V3-style model on the CPU backend, against OpenBLAS SGEMM in the same run.
// Config: model::bench_config() — hidden 256, 4 layers (1 dense + 3 MoE), 4 heads (qk 64+32, v 64),
// q_lora 128, kv_lora 64, dense FFN 1024, 8 routed experts top-2 (FFN 256) + 1 shared, MTP D = 1, vocab 259 —
// batch 8 × seq 256 (2048 tokens), under a precision recipe (--recipe, default fp32). A step = forward + backward
// (model.forward_backward), no optimizer. --profile adds each op's share of the step (ExecCtx::profile).
// Baseline: cblas_sgemm 1024³ with OpenBLAS using the same number of threads, timed between model steps so both
// see the same machine load. Model FLOPs are counted from the config (formula printed): every matmul of the
// forward (Linears, router, head, attention QKᵀ and PV over the causal pairs only) × 3 for forward + backward;
// the backward's attention recompute and all elementwise work are not counted.
// Output: a human summary, then one JSON line.
//   model_step_bench [--steps=5] [--warmup=2] [--batch=8] [--seq=256] [--threads=N] [--recipe=SPEC] [--profile]
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/model.h"
#include "ops/op_table.h"

extern "C" void openblas_set_num_threads(int num_threads);

namespace {
using namespace fp8train;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : (v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]));
}

// Forward matmul MACs per token, by component (see the header comment).
struct FlopCount {
  double linear = 0, attention = 0, router = 0, head = 0;
  double forward_macs_per_token() const { return linear + attention + router + head; }
};

FlopCount count_flops(const model::ModelConfig& c, int64_t seq) {
  FlopCount f;
  const double d = c.hidden_size, H = c.n_heads, dn = c.qk_nope_head_dim, dr = c.qk_rope_head_dim,
               dv = c.v_head_dim, qr = c.q_lora_rank, kr = c.kv_lora_rank;
  const double mla = d * qr + qr * H * (dn + dr) + d * (kr + dr) + kr * H * (dn + dv) + H * dv * d;
  const double pairs_per_token = (static_cast<double>(seq) + 1) / 2;  // causal: T(T+1)/2 pairs per sequence
  const double attn = H * pairs_per_token * ((dn + dr) + dv);
  const double dense = 3 * d * c.intermediate_size;
  const double moe = (c.num_experts_per_tok + c.n_shared_experts) * 3 * d * c.moe_intermediate_size;
  const double router = d * c.n_routed_experts;
  const int64_t blocks = c.n_layers + c.mtp_depth;
  for (int64_t l = 0; l < blocks; ++l) {
    const bool is_moe = l < c.n_layers ? c.is_moe_layer(l) : c.n_dense_layers < c.n_layers;
    f.linear += mla + (is_moe ? moe : dense);
    f.attention += attn;
    if (is_moe) f.router += router;
  }
  f.linear += c.mtp_depth * 2 * d * d;                          // eh_proj
  f.head += static_cast<double>(1 + c.mtp_depth) * d * c.vocab_size;  // shared head for main + each MTP depth
  return f;
}

double sgemm_seconds(int threads, const std::vector<float>& a, const std::vector<float>& b, std::vector<float>& c) {
  openblas_set_num_threads(threads);
  const auto t0 = Clock::now();
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, 1024, 1024, 1024, 1.0f, a.data(), 1024, b.data(), 1024, 0.0f,
              c.data(), 1024);
  const double s = seconds_since(t0);
  openblas_set_num_threads(1);  // the CPU kernels split GEMMs over OpenMP threads themselves
  return s;
}

std::string text_flag(int argc, char** argv, const char* name, const std::string& fallback) {
  const std::string prefix = std::string("--") + name + "=";
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) return argv[i] + prefix.size();
  return fallback;
}

int64_t flag(int argc, char** argv, const char* name, int64_t fallback) {
  const std::string prefix = std::string("--") + name + "=";
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) return std::stoll(argv[i] + prefix.size());
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t steps = flag(argc, argv, "steps", 5), warmup = flag(argc, argv, "warmup", 2);
  const int64_t batch = flag(argc, argv, "batch", 8), seq = flag(argc, argv, "seq", 256);
  const int threads = static_cast<int>(flag(argc, argv, "threads", omp_get_max_threads()));
  const std::string recipe = text_flag(argc, argv, "recipe", "fp32");
  bool profile = false;
  for (int i = 1; i < argc; ++i) profile = profile || std::strcmp(argv[i], "--profile") == 0;
  try {
    ops::set_cpu_threads(threads);
    const model::ModelConfig config = model::bench_config();
    model::DeepSeekV3Model model(config, {.dtype = DType::F32, .seed = 1, .recipe = recipe});
    OpProfile ops_profile;

    std::mt19937_64 rng(1);
    const int64_t n = batch * seq;
    std::vector<int32_t> in(n), tg(n);
    for (int64_t i = 0; i < n; ++i) in[i] = static_cast<int32_t>(rng() % config.vocab_size);
    for (int64_t i = 0; i < n; ++i) tg[i] = (i % seq == seq - 1) ? static_cast<int32_t>(rng() % config.vocab_size) : in[i + 1];
    const Tensor inputs = Tensor::from_vector(in, {n}), targets = Tensor::from_vector(tg, {n});

    std::vector<float> a(1024 * 1024), b(1024 * 1024), c(1024 * 1024);
    std::normal_distribution<float> normal;
    for (auto& x : a) x = normal(rng);
    for (auto& x : b) x = normal(rng);
    for (int i = 0; i < 3; ++i) sgemm_seconds(threads, a, b, c);

    std::vector<double> step_s, sgemm_s;
    double loss = 0;
    for (int64_t s = 0; s < warmup + steps; ++s) {
      for (int i = 0; i < 3; ++i) sgemm_s.push_back(sgemm_seconds(threads, a, b, c));
      model.zero_grad();
      model.set_op_profile(profile && s >= warmup ? &ops_profile : nullptr);
      const auto t0 = Clock::now();
      loss = model.forward_backward(inputs, targets, batch).total;
      const double dt = seconds_since(t0);
      if (s >= warmup) step_s.push_back(dt);
    }
    const FlopCount f = count_flops(config, seq);
    const double model_flops = 3.0 * 2.0 * f.forward_macs_per_token() * static_cast<double>(n);
    const double step = median(step_s), sgemm = median(sgemm_s);
    const double model_rate = model_flops / step / 1e9, sgemm_rate = 2.0 * 1024 * 1024 * 1024 / sgemm / 1e9;
    // best-of-N beside the medians: on a shared machine the minimum is the least disturbed sample of each
    const double best_step = *std::min_element(step_s.begin(), step_s.end());
    const double best_sgemm = *std::min_element(sgemm_s.begin(), sgemm_s.end());
    const double best_model_rate = model_flops / best_step / 1e9;
    const double best_sgemm_rate = 2.0 * 1024 * 1024 * 1024 / best_sgemm / 1e9;
    std::printf("config: %s\n", config.describe().c_str());
    std::printf("tokens per step: %lld (batch %lld x seq %lld), threads %d, recipe %s\n", static_cast<long long>(n),
                static_cast<long long>(batch), static_cast<long long>(seq), threads, recipe.c_str());
    std::printf(
        "FLOPs per step = 3 (fwd+bwd) x 2 x tokens x [Σ_blocks(MLA linears + FFN/MoE linears + router) + causal "
        "attention H·(T+1)/2·(d_qk+d_v) per block + eh_proj 2d² + (1+D)·d·V head]\n");
    std::printf("  forward MACs/token: linears %.0f, attention %.0f, router %.0f, head %.0f -> %.3f GFLOP/step\n",
                f.linear, f.attention, f.router, f.head, model_flops / 1e9);
    std::printf("step: median %.1f ms over %lld steps (loss %.4f) -> %.1f GFLOP/s\n", step * 1e3,
                static_cast<long long>(steps), loss, model_rate);
    std::printf("OpenBLAS SGEMM 1024^3: median %.2f ms -> %.1f GFLOP/s\n", sgemm * 1e3, sgemm_rate);
    std::printf("ratio model/SGEMM: %.1f %% (medians); best of each: step %.1f ms -> %.1f GFLOP/s, SGEMM %.1f "
                "GFLOP/s, ratio %.1f %%\n",
                100 * model_rate / sgemm_rate, best_step * 1e3, best_model_rate, best_sgemm_rate,
                100 * best_model_rate / best_sgemm_rate);
    nlohmann::json by_op = nlohmann::json::object();
    if (profile) {  // each op's share of the mean step, largest first
      std::vector<std::pair<std::string, OpProfile::Entry>> rows;
      for (const auto& e : ops_profile.entries()) rows.push_back(e);
      std::sort(rows.begin(), rows.end(),
                [](const auto& x, const auto& y) { return x.second.seconds > y.second.seconds; });
      double total = 0;
      for (const auto& [name, e] : rows) total += e.seconds;
      const double mean_step = std::accumulate(step_s.begin(), step_s.end(), 0.0) / static_cast<double>(steps);
      std::printf("profile (ms per step, %% of the mean step %.1f ms; ops %.0f %%):\n", mean_step * 1e3,
                  100 * total / steps / mean_step);
      for (const auto& [name, e] : rows) {
        std::printf("  %-24s %8.1f ms %5.1f %%  (%lld calls)\n", name.c_str(), e.seconds / steps * 1e3,
                    100 * e.seconds / steps / mean_step, static_cast<long long>(e.calls / steps));
        by_op[name] = e.seconds / steps * 1e3;
      }
    }
    nlohmann::json j = {{"bench", "model_step"},
                        {"recipe", recipe},
                        {"batch", batch},
                        {"seq", seq},
                        {"threads", threads},
                        {"steps", steps},
                        {"step_ms", step * 1e3},
                        {"model_gflop", model_flops / 1e9},
                        {"model_gflops", model_rate},
                        {"sgemm_1024_gflops", sgemm_rate},
                        {"ratio", model_rate / sgemm_rate},
                        {"best_step_ms", best_step * 1e3},
                        {"best_sgemm_1024_gflops", best_sgemm_rate},
                        {"best_ratio", best_model_rate / best_sgemm_rate}};
    if (profile) j["op_ms_per_step"] = by_op;
    std::printf("%s\n", j.dump().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "model_step_bench: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
