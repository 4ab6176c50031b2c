// h8_bench: timing harness for fp8train's own Hopper FP8 GEMMs (src/ops/cuda/fp8_gemm_*), run on the H200
// by scripts/gpu/h8_run*.sh until `fp8train bench gemm` serves them. For every case, in the same process:
// our kernel (heuristic block size, and with --sweep every built block size), cuBLASLt FP8 with
// 1x128 x 128x128 block scaling (VEC128_32F x BLK128x128_32F; the same operand and scale buffers: cuBLASLt's
// native scale layouts, which our ScaleView reads directly) and cuBLASLt BF16 on same-shape BF16 operands.
// Method: random inputs (never zeros), warm-up, L2 flushed (256 MiB memset) before every timed launch, CUDA
// events around the GEMM alone, median of --reps launches; TFLOP/s = 2MNK / time; GB/s = bytes of A, B, scales
// and D once each / time. Every timed configuration of ours is first checked bit for bit on sampled output
// elements against num::hopper_dot_scaled (the CPU Hopper model), so a fast wrong variant cannot pass.
// Output: one JSON line per case (stdout, prefixed "JSON "), then an aligned table.
// Families: dense (DeepSeek-V3 shape set M in {128, 4096} x (N, K) + 8192^3), grouped (MoE contiguous,
// 8 experts x 4096 tokens, N 4096, K 7168; and uneven token counts), wgrad (7168 x 2048 over 16384 tokens,
// accumulate into FP32; and K-grouped 8 experts).
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "numerics/formats.h"
#include "numerics/hopper_accum.h"
#include "ops/cuda/cublaslt_gemm.h"
#include "ops/cuda/fp8_gemm.h"
#include "ops/cuda/fp8_gemm_plan.h"

// scripts/gpu/h8_experiments.cu: experiment instantiations of the kernel template ("nopromote", "stages3",
// "stages4"), launched from a prepared dense launch; cudaErrorInvalidValue when that variant is not built.
cudaError_t h8_launch_experiment(const std::string& name, const fp8train::ops::cuda::fp8gemm::PreparedLaunch& L,
                                 cudaStream_t stream);
// The same file: a kernel that only reads `bytes` from p (16-byte aligned), for the memory floor (--floor).
cudaError_t h8_read_bytes(const void* p, size_t bytes, unsigned* sink, int num_sms, cudaStream_t stream);

namespace {

using namespace fp8train;
using namespace fp8train::ops::cuda;

void ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(fmt::format("{}: {}", what, cudaGetErrorString(e)));
}
#define CK(x) ck((x), #x)

struct Buf {
  void* p = nullptr;
  size_t bytes = 0;
  explicit Buf(size_t b) : bytes(b) { CK(cudaMalloc(&p, std::max<size_t>(b, 16))); }
  ~Buf() { cudaFree(p); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  template <class T>
  T* as() const { return static_cast<T*>(p); }
};

template <class T>
void upload(Buf& b, const std::vector<T>& h) {
  CK(cudaMemcpy(b.p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
}
template <class T>
std::vector<T> download(const Buf& b, size_t count) {
  std::vector<T> h(count);
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(h.data(), b.p, count * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// --data tri: E4M3 codes of (u1 + u2) * 100 with u uniform in [-1, 1), what `fp8train bench gemm` feeds
// (src/ops/cuda/random_fill.cu), instead of codes uniform over the finite ones.
bool g_tri_data = false;

// Finite E4M3 codes, uniform over the 254 finite codes (never NaN), or (--data tri) the triangular values above.
std::vector<uint8_t> random_e4m3(size_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);
  if (g_tri_data) {
#pragma omp parallel for schedule(static)
    for (int64_t chunk = 0; chunk < static_cast<int64_t>((n + 65535) / 65536); ++chunk) {
      uint64_t s = seed * 1000003 + chunk;
      const size_t end = std::min(n, static_cast<size_t>(chunk + 1) * 65536);
      for (size_t i = static_cast<size_t>(chunk) * 65536; i < end; ++i) {
        const uint64_t r = splitmix(s);
        const float u1 = static_cast<float>(r >> 40) * (2.0f / 16777216.0f) - 1.0f;
        const float u2 = static_cast<float>((r >> 16) & 0xFFFFFF) * (2.0f / 16777216.0f) - 1.0f;
        v[i] = num::e4m3_encode((u1 + u2) * 100.0f);
      }
    }
    return v;
  }
#pragma omp parallel for schedule(static)
  for (int64_t chunk = 0; chunk < static_cast<int64_t>((n + 65535) / 65536); ++chunk) {
    uint64_t s = seed * 1000003 + chunk;
    const size_t end = std::min(n, static_cast<size_t>(chunk + 1) * 65536);
    for (size_t i = static_cast<size_t>(chunk) * 65536; i < end; i += 8) {
      uint64_t r = splitmix(s);
      for (size_t j = i; j < std::min(end, i + 8); ++j, r >>= 8) {
        uint8_t c = static_cast<uint8_t>(r);
        if ((c & 0x7F) == 0x7F) c &= 0xFE;
        v[j] = c;
      }
    }
  }
  return v;
}
// BF16 codes of normal-ish values in [-4, 4) (random mantissa, exponents -3..1).
std::vector<uint16_t> random_bf16(size_t n, uint64_t seed) {
  std::vector<uint16_t> v(n);
#pragma omp parallel for schedule(static)
  for (int64_t chunk = 0; chunk < static_cast<int64_t>((n + 65535) / 65536); ++chunk) {
    uint64_t s = seed * 7919 + chunk;
    const size_t end = std::min(n, static_cast<size_t>(chunk + 1) * 65536);
    for (size_t i = static_cast<size_t>(chunk) * 65536; i < end; ++i) {
      const uint64_t r = splitmix(s);
      const uint16_t sign = static_cast<uint16_t>((r & 1) << 15);
      const uint16_t exp = static_cast<uint16_t>(124 + (r >> 1) % 5);
      v[i] = static_cast<uint16_t>(sign | (exp << 7) | ((r >> 8) & 0x7F));
    }
  }
  return v;
}
std::vector<float> random_scales(size_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> u(0.5f, 1.0f);
  std::uniform_int_distribution<int> e(-4, 4);
  std::vector<float> v(n);
  for (auto& x : v) x = std::ldexp(u(g), e(g));
  return v;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

struct Timing {
  Buf flush{size_t{256} << 20};
  cudaEvent_t start, stop;
  int reps = 20;
  Timing() {
    CK(cudaEventCreate(&start));
    CK(cudaEventCreate(&stop));
  }
  Buf sink{256};
  // clean: after the flush's memset, read the flush buffer back, so that L2 holds clean lines and the timed
  // kernel does not pay for writing back the memset's dirty ones (~50 MB) (--clean-flush).
  bool clean = false;
  int num_sms = 132;
  // Median milliseconds of fn() over reps launches, each after an L2 flush; 3 warm-up launches first.
  double ms(const std::function<void()>& fn) {
    for (int i = 0; i < 3; ++i) fn();
    CK(cudaDeviceSynchronize());
    std::vector<double> t;
    for (int i = 0; i < reps; ++i) {
      CK(cudaMemsetAsync(flush.p, i & 0xFF, flush.bytes, nullptr));
      if (clean) CK(h8_read_bytes(flush.p, flush.bytes, sink.as<unsigned>(), num_sms, nullptr));
      CK(cudaEventRecord(start, nullptr));
      fn();
      CK(cudaEventRecord(stop, nullptr));
      CK(cudaEventSynchronize(stop));
      float m = 0;
      CK(cudaEventElapsedTime(&m, start, stop));
      t.push_back(m);
    }
    CK(cudaGetLastError());
    return median(t);
  }
};

struct Result {
  Result(std::string f, std::string s, std::string v) : family(std::move(f)), shape(std::move(s)), variant(std::move(v)) {}
  std::string family, shape, variant;
  double ms = 0, tflops = 0, gbps = 0;
  std::string note;
};
std::vector<Result> g_results;

void report(const Result& r, double flops, double bytes) {
  Result x = r;
  x.tflops = flops / (x.ms * 1e-3) / 1e12;
  x.gbps = bytes / (x.ms * 1e-3) / 1e9;
  std::printf("JSON {\"family\":\"%s\",\"shape\":\"%s\",\"variant\":\"%s\",\"ms\":%.5f,\"tflops\":%.1f,\"gbps\":%.1f,\"note\":\"%s\"}\n",
              x.family.c_str(), x.shape.c_str(), x.variant.c_str(), x.ms, x.tflops, x.gbps, x.note.c_str());
  std::fflush(stdout);
  g_results.push_back(x);
}

// Sampled bit-exactness check: `samples` random (i, j) against num::hopper_dot_scaled.
// scale_a(i, g), scale_b(j, g) give the scales; out(i, j) the GPU result as float (bf16 decoded or fp32),
// expected = finish(i, j, acc) (bf16 rounding, or c + acc).
struct SampleCheck {
  int checked = 0, bad = 0;
  std::string first;
};
SampleCheck check_samples(int64_t m, int64_t n, int64_t k, const std::vector<uint8_t>& a, const std::vector<uint8_t>& b,
                          const std::function<float(int64_t, int64_t)>& scale_a,
                          const std::function<float(int64_t, int64_t)>& scale_b,
                          const std::function<uint32_t(int64_t, int64_t)>& got_bits,
                          const std::function<uint32_t(int64_t, int64_t, float)>& want_bits, int samples, uint64_t seed,
                          int64_t a_row_offset = 0, int64_t b_row_offset = 0, int64_t k_offset = 0, int64_t lda = 0,
                          int64_t ldb = 0, int k_splits = 1) {
  if (lda == 0) lda = k;
  if (ldb == 0) ldb = k;
  SampleCheck r;
  std::mt19937_64 g(seed);
  const int64_t kb = k / 128;
  std::vector<std::pair<int64_t, int64_t>> pts;
  for (int s = 0; s < samples; ++s) pts.push_back({static_cast<int64_t>(g() % m), static_cast<int64_t>(g() % n)});
  pts.push_back({m - 1, n - 1});
  pts.push_back({0, 0});
  std::vector<int> bad_flags(pts.size(), 0);
  std::vector<std::string> msgs(pts.size());
#pragma omp parallel for schedule(dynamic, 4)
  for (int64_t s = 0; s < static_cast<int64_t>(pts.size()); ++s) {
    const auto [i, j] = pts[s];
    std::vector<float> sa(kb), sb(kb);
    for (int64_t q = 0; q < kb; ++q) {
      sa[q] = scale_a(i, q + k_offset / 128);
      sb[q] = scale_b(j, q + k_offset / 128);
    }
    const float acc = num::hopper_dot_scaled_split(a.data() + (a_row_offset + i) * lda + k_offset,
                                                   num::Fp8Format::E4M3, sa.data(),
                                                   b.data() + (b_row_offset + j) * ldb + k_offset, num::Fp8Format::E4M3,
                                                   sb.data(), static_cast<int>(k), 128, k_splits);
    const uint32_t want = want_bits(i, j, acc), got = got_bits(i, j);
    if (want != got) {
      bad_flags[s] = 1;
      msgs[s] = fmt::format("({}, {}): got 0x{:x} want 0x{:x}", i, j, got, want);
    }
  }
  for (size_t s = 0; s < pts.size(); ++s) {
    ++r.checked;
    if (bad_flags[s]) {
      if (r.bad == 0) r.first = msgs[s];
      ++r.bad;
    }
  }
  return r;
}

std::string check_note(const SampleCheck& c) {
  return c.bad == 0 ? fmt::format("exact {}/{}", c.checked, c.checked)
                    : fmt::format("MISMATCH {}/{} first {}", c.bad, c.checked, c.first);
}

// ---- cuBLASLt baseline -------------------------------------------------------------------------------
// A minimal cuBLASLt call of our own (ops/cuda/cublaslt_gemm.cpp is tried first): row-major D[M, N] = A.B^T is
// column-major D^T = B.A^T, so cuBLASLt's A is our B (TRANSA = T) and its B our A. Scale pointers are set
// BEFORE the algorithm query: with VEC128/BLK128x128 scale modes cublasLtMatmulAlgoGetHeuristic rejects a
// descriptor without them (CUBLAS_STATUS_INVALID_VALUE).
struct LtCall {
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  cublasLtMatmulAlgo_t algo{};
  void* workspace = nullptr;
  size_t ws_bytes = size_t{64} << 20;
  float beta = 0.0f;
  const void *a = nullptr, *b = nullptr;
  void* d = nullptr;
  std::string error;
  LtCall(int64_t m, int64_t n, int64_t k, bool fp8, int a_scale_mode, int b_scale_mode, const float* a_scales,
         const float* b_scales, bool out_f32, bool accumulate, const void* a_ptr, const void* b_ptr, void* d_ptr)
      : beta(accumulate ? 1.0f : 0.0f), a(a_ptr), b(b_ptr), d(d_ptr) {
    auto ok = [&](cublasStatus_t st, const char* what) {
      if (st != CUBLAS_STATUS_SUCCESS && error.empty()) error = fmt::format("{}: {}", what, cublasLtGetStatusName(st));
      return st == CUBLAS_STATUS_SUCCESS;
    };
    CK(cudaMalloc(&workspace, ws_bytes));
    ok(cublasLtCreate(&handle), "create");
    ok(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc");
    const int32_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N;
    ok(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_t, sizeof op_t), "transa");
    ok(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_n, sizeof op_n), "transb");
    if (fp8) {
      const int32_t ma = b_scale_mode, mb = a_scale_mode;  // cuBLASLt A = our B
      ok(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &ma, sizeof ma), "a scale mode");
      ok(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mb, sizeof mb), "b scale mode");
      ok(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &b_scales, sizeof b_scales), "a scale ptr");
      ok(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &a_scales, sizeof a_scales), "b scale ptr");
    }
    const cudaDataType_t in = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF, out = out_f32 ? CUDA_R_32F : CUDA_R_16BF;
    ok(cublasLtMatrixLayoutCreate(&la, in, k, n, k), "layout a");
    ok(cublasLtMatrixLayoutCreate(&lb, in, k, m, k), "layout b");
    ok(cublasLtMatrixLayoutCreate(&ld, out, n, m, n), "layout d");
    cublasLtMatmulPreference_t pref = nullptr;
    ok(cublasLtMatmulPreferenceCreate(&pref), "pref");
    ok(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes), "ws");
    cublasLtMatmulHeuristicResult_t res{};
    int returned = 0;
    if (error.empty() && ok(cublasLtMatmulAlgoGetHeuristic(handle, desc, la, lb, ld, ld, pref, 1, &res, &returned), "heuristic") &&
        returned == 0)
      error = "no algorithm";
    algo = res.algo;
    cublasLtMatmulPreferenceDestroy(pref);
  }
  ~LtCall() {
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (ld) cublasLtMatrixLayoutDestroy(ld);
    if (desc) cublasLtMatmulDescDestroy(desc);
    if (handle) cublasLtDestroy(handle);
    cudaFree(workspace);
  }
  void run() {
    const float alpha = 1.0f;
    const cublasStatus_t st = cublasLtMatmul(handle, desc, &alpha, b, la, a, lb, &beta, d, ld, d, ld, &algo, workspace,
                                             ws_bytes, nullptr);
    if (st != CUBLAS_STATUS_SUCCESS) throw Error(fmt::format("cublasLtMatmul: {}", cublasLtGetStatusName(st)));
  }
};

int g_num_sms = 132;
bool g_split_sweep = false;
bool g_floor = false;
bool g_clean_flush = false;
bool g_rows192 = false;
bool g_experiments = false;
std::vector<std::string> g_exp_names;  // --exp a,b: named experiments at the heuristic's tile
std::set<std::string> g_exp_pool;      // storage for their names
bool g_first_wrapper_error = true;

const char* mc_name(Fp8GemmMulticast m) {
  switch (m) {
    case Fp8GemmMulticast::None: return "-";
    case Fp8GemmMulticast::ShareA: return "A";
    case Fp8GemmMulticast::ShareB: return "B";
    default: return "?";
  }
}

// ---- dense --------------------------------------------------------------------------------------------
void bench_dense(Timing& timing, int64_t m, int64_t n, int64_t k, bool sweep, bool baselines) {
  const std::string shape = fmt::format("{}x{}x{}", m, n, k);
  const int64_t kb = k / 128, nb = (n + 127) / 128, ld = (kb + 3) / 4 * 4;
  const std::vector<uint8_t> ha = random_e4m3(static_cast<size_t>(m * k), 1 + m + n + k);
  const std::vector<uint8_t> hb = random_e4m3(static_cast<size_t>(n * k), 2 + m + n + k);
  const std::vector<float> hsa = random_scales(static_cast<size_t>(kb * m), 3);  // [kb][m] (cuBLASLt native)
  std::vector<float> hsb = random_scales(static_cast<size_t>(nb * ld), 4);       // [nb][ld]
  Buf a(ha.size()), b(hb.size()), sa(hsa.size() * 4), sb(hsb.size() * 4), d(static_cast<size_t>(m * n) * 2),
      d2(static_cast<size_t>(m * n) * 2);
  upload(a, ha);
  upload(b, hb);
  upload(sa, hsa);
  upload(sb, hsb);
  const double flops = 2.0 * m * n * k;
  const double bytes = static_cast<double>(m * k + n * k + 2 * m * n) + 4.0 * (hsa.size() + hsb.size());

  Fp8GemmDenseProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.a = a.as<uint8_t>();
  p.b = b.as<uint8_t>();
  p.a_scales = ScaleView{sa.as<float>(), 1, m, 0};
  p.b_scales = ScaleView{sb.as<float>(), ld, 1, 0};
  p.d = d.as<uint16_t>();

  auto scale_a = [&](int64_t i, int64_t g) { return hsa[g * m + i]; };
  auto scale_b = [&](int64_t j, int64_t g) { return hsb[(j / 128) * ld + g]; };
  std::vector<uint16_t> hd;
  auto got = [&](int64_t i, int64_t j) -> uint32_t { return hd[i * n + j]; };
  auto want = [&](int64_t, int64_t, float acc) -> uint32_t { return num::bf16_encode(acc); };

  std::vector<Fp8GemmConfig> variants;
  const Fp8GemmConfig heur = fp8_gemm_dense_heuristic(m, n, k, g_num_sms);
  variants.push_back(heur);
  if (g_split_sweep && m <= 256) {  // split-K: every split-K width x range counts with >= 2 K blocks per range
    int count = 0;
    const int* bns = fp8_gemm_dense_split_block_ns(&count);
    for (int i = 0; i < count; ++i)
      for (int splits : {1, 2, 3, 4, 6, 8, 12, 16}) {
        if (splits > 1 && kb / splits < 2) continue;
        Fp8GemmConfig c;
        c.block_n = bns[i];
        c.k_splits = splits;
        if (c.block_n != heur.block_n || c.k_splits != heur.k_splits) variants.push_back(c);
      }
  }
  if (g_rows192 && m > 256) {  // 192-row tiles (three math warpgroups) beside the 128-row ones
    for (int bm : {128, 192}) {
      Fp8GemmConfig c;
      c.block_n = 128;
      c.block_m = bm;
      variants.push_back(c);
    }
  }
  if (sweep && m > 256) {  // 192-row tiles, without and with B multicast
    for (Fp8GemmMulticast mc : {Fp8GemmMulticast::None, Fp8GemmMulticast::ShareB}) {
      Fp8GemmConfig c;
      c.block_n = 128;
      c.block_m = 192;
      c.multicast = mc;
      if (c.block_m != heur.block_m || c.multicast != heur.multicast) variants.push_back(c);
    }
  }
  if (sweep) {
    int count = 0;
    const int* bns = fp8_gemm_dense_block_ns(&count);
    for (int i = 0; i < count; ++i)
      for (Fp8GemmMulticast mc : {Fp8GemmMulticast::None, Fp8GemmMulticast::ShareA, Fp8GemmMulticast::ShareB}) {
        Fp8GemmConfig c;
        c.block_n = bns[i];
        c.multicast = mc;
        if (c.block_n != heur.block_n || c.multicast != heur.multicast) variants.push_back(c);
      }
  }
  for (size_t vi = 0; vi < variants.size(); ++vi) {
    const Fp8GemmConfig& cfg = variants[vi];
    CK(cudaMemset(d.p, 0xA5, d.bytes));
    fp8_gemm_dense(p, cfg, nullptr);
    hd = download<uint16_t>(d, static_cast<size_t>(m * n));
    const int splits = fp8gemm::prepare_dense(p, cfg).args.k_splits;
    const SampleCheck c =
        check_samples(m, n, k, ha, hb, scale_a, scale_b, got, want, vi == 0 ? 384 : 48, 11 + vi, 0, 0, 0, 0, 0, splits);
    Result r{"dense", shape,
             fmt::format("ours {}bn{} mc{}{}{}", cfg.block_m == 192 ? "bm192 " : "", cfg.block_n, mc_name(cfg.multicast),
                         splits > 1 ? fmt::format(" split{}", splits) : std::string(), vi == 0 ? " (heur)" : "")};
    r.ms = timing.ms([&] { fp8_gemm_dense(p, cfg, nullptr); });
    r.note = check_note(c);
    report(r, flops, bytes);
  }
  if (g_experiments) {
    struct Exp {
      int bn;
      Fp8GemmMulticast mc;
      const char* name;
      int bm = 128;
    };
    using MC = Fp8GemmMulticast;
    std::vector<Exp> exps;
    if (!g_exp_names.empty()) {
      // --exp NAME[@BN[-|A|B]],...: each named experiment at the heuristic's tile, or at 128 x BN with the given
      // multicast (none, A, B)
      for (const std::string& spec : g_exp_names) {
        const size_t at = spec.find('@');
        const char* name = g_exp_pool.insert(spec.substr(0, at)).first->c_str();
        if (at == std::string::npos) {
          exps.push_back({heur.block_n, heur.multicast, name, heur.block_m});
          continue;
        }
        const std::string tile = spec.substr(at + 1);
        const char mc = tile.empty() ? '-' : tile.back();
        const int bn = std::atoi(tile.c_str());
        exps.push_back({bn, mc == 'A' ? MC::ShareA : (mc == 'B' ? MC::ShareB : MC::None), name, 128});
      }
    } else if (g_rows192) {  // the cost split of 128- and 192-row tiles at block_n 128
      if (m > 256)
        for (int bm : {128, 192})
          for (const char* ex : {"noload", "noload_nopromote", "bulk_nopromote"}) exps.push_back({128, MC::None, ex, bm});
    } else if (m == 128) {
      exps = {{64, MC::None, "bulk"}, {64, MC::ShareA, "bulk"}, {64, MC::None, "bulk_pingpong"}};
    } else {
      for (int bn : {128, 192})
        for (MC mc : {MC::None, MC::ShareA, MC::ShareB})
          for (const char* ex : {"bulk", "bulk_pingpong"}) exps.push_back({bn, mc, ex});
    }
    for (const Exp& e : exps) {
      Fp8GemmConfig cfg;
      cfg.block_n = e.bn;
      cfg.block_m = e.bm;
      cfg.multicast = e.mc;
      const fp8gemm::PreparedLaunch L = fp8gemm::prepare_dense(p, cfg);
      CK(cudaMemset(d.p, 0xA5, d.bytes));
      if (h8_launch_experiment(e.name, L, nullptr) != cudaSuccess) {
        std::printf("experiment %s bn%d not built\n", e.name, e.bn);
        continue;
      }
      hd = download<uint16_t>(d, static_cast<size_t>(m * n));
      const std::string ename = e.name;
      const bool exact_numerics = ename.find("nopromote") == std::string::npos &&
                                  (ename == "pingpong" || ename.rfind("bulk", 0) == 0 || ename == "double" ||
                                   ename.rfind("stages", 0) == 0);
      Result r{"dense", shape, fmt::format("exp {} {}bn{} mc{}", e.name, e.bm == 192 ? "bm192 " : "", e.bn, mc_name(e.mc))};
      if (exact_numerics) r.note = check_note(check_samples(m, n, k, ha, hb, scale_a, scale_b, got, want, 48, 5));
      else r.note = "experiment: numerics differ by design";
      r.ms = timing.ms([&] { CK(h8_launch_experiment(e.name, L, nullptr)); });
      report(r, flops, bytes);
    }
  }
  if (g_floor && m <= 256) {  // reading A and B once, nothing else: the memory floor in this timing
    Result r{"dense", shape, "floor: read A + B once"};
    r.ms = timing.ms([&] {
      CK(h8_read_bytes(b.p, static_cast<size_t>(n * k), d2.as<unsigned>(), g_num_sms, nullptr));
      CK(h8_read_bytes(a.p, static_cast<size_t>(m * k), d2.as<unsigned>(), g_num_sms, nullptr));
    });
    r.note = "two read kernels back to back";
    report(r, flops, bytes);
    Result rb{"dense", shape, "floor: read B once"};
    rb.ms = timing.ms([&] { CK(h8_read_bytes(b.p, static_cast<size_t>(n * k), d2.as<unsigned>(), g_num_sms, nullptr)); });
    report(rb, flops, bytes);
  }
  if (!baselines) return;
  {
    LtCall lt(m, n, k, true, CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F, CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F,
              sa.as<float>(), sb.as<float>(), false, false, a.p, b.p, d2.p);
    if (!lt.error.empty()) {
      std::printf("own cuBLASLt FP8 baseline unavailable for %s: %s\n", shape.c_str(), lt.error.c_str());
    } else {
      CK(cudaMemset(d2.p, 0xA5, d2.bytes));
      lt.run();
      hd = download<uint16_t>(d2, static_cast<size_t>(m * n));
      const SampleCheck c = check_samples(m, n, k, ha, hb, scale_a, scale_b, got, want, 96, 99);
      Result r{"dense", shape, "cublaslt fp8 1x128.128x128"};
      r.ms = timing.ms([&] { lt.run(); });
      r.note = c.bad == 0 ? fmt::format("hopper-model exact on {} samples", c.checked)
                          : fmt::format("differs from the hopper model on {}/{} samples", c.bad, c.checked);
      report(r, flops, bytes);
    }
  }
  try {  // the project's wrapper (ops/cuda/cublaslt_gemm.h), for comparison
    ScaledGemmProblem q;
    q.m = m;
    q.n = n;
    q.k = k;
    q.a_scaling = OperandScaling::Tile1x128;
    q.b_scaling = OperandScaling::Block128x128;
    q.a_scale_layout = ScaleLayout::Native;
    q.b_scale_layout = ScaleLayout::Native;
    q.out = GemmOutput::BF16;
    CublasLtGemm& lt = cublaslt_gemm(0);
    lt.run(q, a.p, sa.as<float>(), b.p, sb.as<float>(), d2.p, nullptr);
    CK(cudaDeviceSynchronize());
    Result r{"dense", shape, "cublaslt fp8 (ops wrapper)"};
    r.ms = timing.ms([&] { lt.run(q, a.p, sa.as<float>(), b.p, sb.as<float>(), d2.p, nullptr); });
    report(r, flops, bytes);
  } catch (const std::exception& e) {
    if (g_first_wrapper_error) std::printf("ops cuBLASLt wrapper failed for %s: %.300s\n", shape.c_str(), e.what());
    g_first_wrapper_error = false;
  }
  {
    const std::vector<uint16_t> ha16 = random_bf16(static_cast<size_t>(m * k), 5), hb16 = random_bf16(static_cast<size_t>(n * k), 6);
    Buf a16(ha16.size() * 2), b16(hb16.size() * 2);
    upload(a16, ha16);
    upload(b16, hb16);
    LtCall lt(m, n, k, false, 0, 0, nullptr, nullptr, false, false, a16.p, b16.p, d2.p);
    if (!lt.error.empty()) {
      std::printf("cuBLASLt BF16 baseline unavailable for %s: %s\n", shape.c_str(), lt.error.c_str());
    } else {
      Result r{"dense", shape, "cublaslt bf16"};
      r.ms = timing.ms([&] { lt.run(); });
      report(r, flops, static_cast<double>(2 * (m * k + n * k + m * n)));
    }
  }
}

// ---- grouped -------------------------------------------------------------------------------------------
void bench_grouped(Timing& timing, const std::vector<int>& tokens, int64_t n, int64_t k, bool sweep) {
  const int groups = static_cast<int>(tokens.size());
  std::vector<int32_t> off(groups + 1, 0);
  int64_t real_rows = 0;
  for (int e = 0; e < groups; ++e) {
    off[e + 1] = off[e] + (tokens[e] + 127) / 128 * 128;
    real_rows += tokens[e];
  }
  const int64_t m = off[groups], kb = k / 128, nb = (n + 127) / 128;
  const bool even = std::all_of(tokens.begin(), tokens.end(), [&](int t) { return t == tokens[0]; });
  const std::string shape = fmt::format("{}e {}tok{} n{} k{}", groups, real_rows, even ? "" : " uneven", n, k);
  const std::vector<uint8_t> ha = random_e4m3(static_cast<size_t>(m * k), 21), hb = random_e4m3(static_cast<size_t>(groups * n * k), 22);
  // Scales in both layouts: row-major ([m][kb], [e][nb][kb]: QuantTensor's) and cuBLASLt-native padded (A MN-major
  // [kb][m], B rows padded to a multiple of 4 K blocks: [e][nb][ld]), which takes the bulk scale copies.
  const int64_t ld = (kb + 3) / 4 * 4;
  const std::vector<float> hsa = random_scales(static_cast<size_t>(m * kb), 23), hsb = random_scales(static_cast<size_t>(groups * nb * kb), 24);
  std::vector<float> hsa_mn(static_cast<size_t>(kb * m)), hsb_pad(static_cast<size_t>(groups * nb * ld), 1.0f);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t g = 0; g < kb; ++g) hsa_mn[g * m + i] = hsa[i * kb + g];
  for (int64_t r = 0; r < groups * nb; ++r)
    for (int64_t g = 0; g < kb; ++g) hsb_pad[r * ld + g] = hsb[r * kb + g];
  Buf a(ha.size()), b(hb.size()), sa(hsa.size() * 4), sb(hsb.size() * 4), sa_mn(hsa_mn.size() * 4),
      sb_pad(hsb_pad.size() * 4), d(static_cast<size_t>(m * n) * 2), doff(off.size() * 4);
  upload(a, ha);
  upload(b, hb);
  upload(sa, hsa);
  upload(sb, hsb);
  upload(sa_mn, hsa_mn);
  upload(sb_pad, hsb_pad);
  upload(doff, off);
  Fp8GemmGroupedProblem p;
  p.m_total = m;
  p.n = n;
  p.k = k;
  p.num_groups = groups;
  p.row_offsets = doff.as<int32_t>();
  p.a = a.as<uint8_t>();
  p.a_scales = ScaleView{sa_mn.as<float>(), 1, m, 0};
  p.b = b.as<uint8_t>();
  p.b_scales = ScaleView{sb_pad.as<float>(), ld, 1, nb * ld};
  p.d = d.as<uint16_t>();
  Fp8GemmGroupedProblem p_rowmajor = p;
  p_rowmajor.a_scales = row_major_scale_view(sa.as<float>(), kb);
  p_rowmajor.b_scales = row_major_scale_view(sb.as<float>(), kb, nb * kb);
  // FLOPs of the real tokens (padding rows are overhead the kernel pays).
  const double flops = 2.0 * real_rows * n * k;
  const double bytes = static_cast<double>(m * k + groups * n * k + 2 * m * n);
  std::vector<Fp8GemmConfig> variants{fp8_gemm_grouped_heuristic(m, n, k, g_num_sms)};
  if (sweep) {
    int count = 0;
    const int* bns = fp8_gemm_grouped_block_ns(&count);
    for (int i = 0; i < count; ++i)
      for (Fp8GemmMulticast mc : {Fp8GemmMulticast::None, Fp8GemmMulticast::ShareA}) {
        Fp8GemmConfig c;
        c.block_n = bns[i];
        c.multicast = mc;
        if (c.block_n != variants[0].block_n || c.multicast != variants[0].multicast) variants.push_back(c);
      }
  }
  variants.push_back(variants[0]);  // last: the heuristic's configuration with row-major scales (cp.async path)
  std::vector<uint16_t> hd;
  for (size_t vi = 0; vi < variants.size(); ++vi) {
    const Fp8GemmConfig& cfg = variants[vi];
    const bool rowmajor = vi + 1 == variants.size();
    const Fp8GemmGroupedProblem& pv = rowmajor ? p_rowmajor : p;
    CK(cudaMemset(d.p, 0xA5, d.bytes));
    fp8_gemm_grouped(pv, cfg, nullptr);
    hd = download<uint16_t>(d, static_cast<size_t>(m * n));
    SampleCheck total;
    for (int e = 0; e < groups; ++e) {
      const int64_t rows = off[e + 1] - off[e];
      if (rows == 0) continue;
      const SampleCheck c = check_samples(
          rows, n, k, ha, hb, [&](int64_t i, int64_t g) { return hsa[(off[e] + i) * kb + g]; },
          [&](int64_t j, int64_t g) { return hsb[(e * nb + j / 128) * kb + g]; },
          [&](int64_t i, int64_t j) -> uint32_t { return hd[(off[e] + i) * n + j]; },
          [&](int64_t, int64_t, float acc) -> uint32_t { return num::bf16_encode(acc); }, vi == 0 ? 48 : 12, 31 + e,
          off[e], e * n);
      total.checked += c.checked;
      if (c.bad && total.bad == 0) total.first = fmt::format("expert {} {}", e, c.first);
      total.bad += c.bad;
    }
    Result r{"grouped", shape,
             fmt::format("ours bn{} mc{}{}", cfg.block_n, mc_name(cfg.multicast),
                         rowmajor ? " row-major scales" : (vi == 0 ? " (heur)" : ""))};
    r.ms = timing.ms([&] { fp8_gemm_grouped(pv, cfg, nullptr); });
    r.note = check_note(total);
    report(r, flops, bytes);
  }
}

// ---- wgrad ---------------------------------------------------------------------------------------------
void bench_wgrad(Timing& timing, int64_t m, int64_t n, const std::vector<int>& tokens, bool sweep, bool baselines) {
  const int groups = static_cast<int>(tokens.size());
  std::vector<int32_t> off(groups + 1, 0);
  for (int e = 0; e < groups; ++e) off[e + 1] = off[e] + (tokens[e] + 127) / 128 * 128;
  const int64_t k = off[groups], kb = k / 128;
  const std::string shape = groups == 1 ? fmt::format("{}x{}x{}", m, n, k) : fmt::format("{}e {}x{} k{}", groups, m, n, k);
  const std::vector<uint8_t> ha = random_e4m3(static_cast<size_t>(m * k), 41), hb = random_e4m3(static_cast<size_t>(n * k), 42);
  const std::vector<float> hsa = random_scales(static_cast<size_t>(kb * m), 43), hsb = random_scales(static_cast<size_t>(kb * n), 44);
  std::vector<float> hc(static_cast<size_t>(groups * m * n));
  {
    std::mt19937_64 g(45);
    std::normal_distribution<float> nd(0.0f, 1000.0f);
    for (auto& x : hc) x = nd(g);
  }
  Buf a(ha.size()), b(hb.size()), sa(hsa.size() * 4), sb(hsb.size() * 4), c(hc.size() * 4), d(hc.size() * 4),
      doff(off.size() * 4);
  upload(a, ha);
  upload(b, hb);
  upload(sa, hsa);  // [kb][m]: cuBLASLt's native VEC128 layout
  upload(sb, hsb);  // [kb][n]
  upload(c, hc);
  upload(doff, off);
  Fp8GemmWgradProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.num_groups = groups;
  p.k_offsets = groups > 1 ? doff.as<int32_t>() : nullptr;
  p.a = a.as<uint8_t>();
  p.b = b.as<uint8_t>();
  p.a_scales = ScaleView{sa.as<float>(), 1, m, 0};
  p.b_scales = ScaleView{sb.as<float>(), 1, n, 0};
  p.c = c.as<float>();
  p.d = d.as<float>();
  const double flops = 2.0 * m * n * k;
  const double bytes = static_cast<double>(m * k + n * k) + 8.0 * groups * m * n;
  std::vector<Fp8GemmConfig> variants{fp8_gemm_wgrad_heuristic(m, n, k, groups, g_num_sms)};
  if (g_rows192)
    for (int bm : {128, 192}) {
      Fp8GemmConfig c;
      c.block_n = 128;
      c.block_m = bm;
      variants.push_back(c);
    }
  if (sweep) {
    int count = 0;
    const int* bns = fp8_gemm_wgrad_block_ns(&count);
    for (int i = 0; i < count; ++i)
      for (Fp8GemmMulticast mc : {Fp8GemmMulticast::None, Fp8GemmMulticast::ShareA, Fp8GemmMulticast::ShareB}) {
        Fp8GemmConfig c;
        c.block_n = bns[i];
        c.multicast = mc;
        if (c.block_n != variants[0].block_n || c.multicast != variants[0].multicast) variants.push_back(c);
      }
  }
  std::vector<float> hd;
  for (size_t vi = 0; vi < variants.size(); ++vi) {
    const Fp8GemmConfig& cfg = variants[vi];
    upload(c, hc);  // the timed runs below accumulate into c
    CK(cudaMemset(d.p, 0xA5, d.bytes));
    fp8_gemm_wgrad(p, cfg, nullptr);
    hd = download<float>(d, hc.size());
    SampleCheck total;
    for (int e = 0; e < groups; ++e) {
      const int64_t ke = off[e + 1] - off[e];
      if (ke == 0) continue;
      const SampleCheck s = check_samples(
          m, n, ke, ha, hb, [&](int64_t i, int64_t g) { return hsa[g * m + i]; },
          [&](int64_t j, int64_t g) { return hsb[g * n + j]; },
          [&](int64_t i, int64_t j) -> uint32_t { return num::float_bits(hd[(e * m + i) * n + j]); },
          [&](int64_t i, int64_t j, float acc) -> uint32_t { return num::float_bits(hc[(e * m + i) * n + j] + acc); },
          groups == 1 ? (vi == 0 ? 256 : 48) : 16, 51 + e, 0, 0, off[e], k, k);
      total.checked += s.checked;
      if (s.bad && total.bad == 0) total.first = fmt::format("group {} {}", e, s.first);
      total.bad += s.bad;
    }
    Result r{"wgrad", shape, fmt::format("ours {}bn{} mc{}{}", cfg.block_m == 192 ? "bm192 " : "", cfg.block_n,
                                         mc_name(cfg.multicast), vi == 0 ? " (heur)" : "")};
    // Timed in place (d = c = d + A.B^T), as gradient accumulation runs.
    Fp8GemmWgradProblem pin = p;
    pin.d = c.as<float>();
    r.ms = timing.ms([&] { fp8_gemm_wgrad(pin, cfg, nullptr); });
    r.note = check_note(total);
    report(r, flops, bytes);
  }
  if (!baselines || groups != 1) return;
  upload(d, hc);
  LtCall lt(m, n, k, true, CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F, CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F,
            sa.as<float>(), sb.as<float>(), true, true, a.p, b.p, d.p);
  if (!lt.error.empty()) {
    std::printf("own cuBLASLt Wgrad baseline unavailable for %s: %s\n", shape.c_str(), lt.error.c_str());
    return;
  }
  lt.run();
  hd = download<float>(d, hc.size());
  const SampleCheck sc = check_samples(
      m, n, k, ha, hb, [&](int64_t i, int64_t g) { return hsa[g * m + i]; },
      [&](int64_t j, int64_t g) { return hsb[g * n + j]; },
      [&](int64_t i, int64_t j) -> uint32_t { return num::float_bits(hd[i * n + j]); },
      [&](int64_t i, int64_t j, float acc) -> uint32_t { return num::float_bits(hc[i * n + j] + acc); }, 96, 77);
  Result r{"wgrad", shape, "cublaslt fp8 1x128.1x128 +=C"};
  r.ms = timing.ms([&] { lt.run(); });
  r.note = sc.bad == 0 ? fmt::format("hopper-model exact on {} samples", sc.checked)
                       : fmt::format("differs from the hopper model on {}/{} samples", sc.bad, sc.checked);
  report(r, flops, bytes);
}

// Random operands of one dense problem in cuBLASLt's native scale layouts (A scales [K/128][M], B scales
// [N/128][ld] with ld = K/128 padded to 4: the layouts that take the kernels' bulk-copy scale path), for the
// single-configuration modes below.
struct DenseOperands {
  int64_t m, n, k, kb, nb, ld;
  Buf a, b, sa, sb, d;
  DenseOperands(int64_t m_, int64_t n_, int64_t k_)
      : m(m_), n(n_), k(k_), kb(k_ / 128), nb((n_ + 127) / 128), ld((k_ / 128 + 3) / 4 * 4),
        a(static_cast<size_t>(m_ * k_)), b(static_cast<size_t>(n_ * k_)), sa(static_cast<size_t>(m_ * kb) * 4),
        sb(static_cast<size_t>(nb * ld) * 4), d(static_cast<size_t>(m_ * n_) * 2) {
    upload(a, random_e4m3(a.bytes, 1));
    upload(b, random_e4m3(b.bytes, 2));
    upload(sa, random_scales(static_cast<size_t>(m * kb), 3));
    upload(sb, random_scales(static_cast<size_t>(nb * ld), 4));
  }
  Fp8GemmDenseProblem problem() const {
    Fp8GemmDenseProblem p;
    p.m = m;
    p.n = n;
    p.k = k;
    p.a = a.as<uint8_t>();
    p.b = b.as<uint8_t>();
    p.a_scales = ScaleView{sa.as<float>(), 1, m, 0};
    p.b_scales = row_major_scale_view(sb.as<float>(), ld);
    p.d = d.as<uint16_t>();
    return p;
  }
};

// Three launches of one dense configuration, for `ncu --launch-skip 2 --launch-count 1`: --profile M N K BN MC.
int profile_dense(const std::vector<long long>& v) {
  const DenseOperands ops(v[0], v[1], v[2]);
  const Fp8GemmDenseProblem p = ops.problem();
  Fp8GemmConfig cfg;
  cfg.block_n = static_cast<int>(v[3]);
  cfg.multicast = v[4] == 1 ? Fp8GemmMulticast::ShareA : (v[4] == 2 ? Fp8GemmMulticast::ShareB : Fp8GemmMulticast::None);
  if (const char* s = std::getenv("H8_SPLITS")) cfg.k_splits = std::atoi(s);  // split-K ranges (default 1)
  for (int i = 0; i < 3; ++i) fp8_gemm_dense(p, cfg, nullptr);
  CK(cudaDeviceSynchronize());
  std::printf("profiled %s\n", cfg.describe().c_str());
  return 0;
}

// cuBLASLt's block-scaled FP8 GEMM on the same operands, three launches (for ncu): --lt M N K.
int lt_profile(const std::vector<long long>& v) {
  const DenseOperands ops(v[0], v[1], v[2]);
  LtCall lt(ops.m, ops.n, ops.k, true, CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F,
            CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F, ops.sa.as<float>(), ops.sb.as<float>(), false, false, ops.a.p,
            ops.b.p, ops.d.p);
  if (!lt.error.empty()) {
    std::printf("cuBLASLt unavailable: %s\n", lt.error.c_str());
    return 1;
  }
  for (int i = 0; i < 3; ++i) lt.run();
  CK(cudaDeviceSynchronize());
  std::printf("profiled cuBLASLt %lldx%lldx%lld\n", (long long)ops.m, (long long)ops.n, (long long)ops.k);
  return 0;
}

// Multicast diagnosis: one dense shape and block width, each multicast mode (and the direct epilogue) with the
// persistent grid at every SM and at half of them, so the time per unit of work shows whether the clusters run
// concurrently (--mcdiag M N K BLOCK_N).
int mcdiag_dense(Timing& timing, const std::vector<long long>& v) {
  const DenseOperands ops(v[0], v[1], v[2]);
  const Fp8GemmDenseProblem p = ops.problem();
  const int64_t m = ops.m, n = ops.n, k = ops.k;
  const double flops = 2.0 * m * n * k;
  for (Fp8GemmEpilogue ep : {Fp8GemmEpilogue::TmaStore, Fp8GemmEpilogue::Direct})
  for (Fp8GemmMulticast mc : {Fp8GemmMulticast::None, Fp8GemmMulticast::ShareA, Fp8GemmMulticast::ShareB})
    for (int grid : {0, g_num_sms / 2}) {
      if (ep == Fp8GemmEpilogue::Direct && mc != Fp8GemmMulticast::None) continue;
      Fp8GemmConfig cfg;
      cfg.block_n = static_cast<int>(v[3]);
      cfg.multicast = mc;
      cfg.grid = grid;
      cfg.epilogue = ep;
      const double ms = timing.ms([&] { fp8_gemm_dense(p, cfg, nullptr); });
      std::printf("mcdiag %lldx%lldx%lld %-50s %9.4f ms %8.1f TFLOP/s  per-CTA-share %.4f\n", (long long)m, (long long)n,
                  (long long)k, cfg.describe().c_str(), ms, flops / ms * 1e-9,
                  ms * (grid == 0 ? g_num_sms : grid) / g_num_sms);
    }
  return 0;
}

void print_table() {
  std::printf("\n%-7s %-28s %-30s %8s %7s %7s  %s\n", "family", "shape", "variant", "ms", "TFLOP/s", "GB/s", "note");
  for (const Result& r : g_results)
    std::printf("%-7s %-28.28s %-30.30s %8.4f %7.1f %7.1f  %.44s\n", r.family.c_str(), r.shape.c_str(), r.variant.c_str(),
                r.ms, r.tflops, r.gbps, r.note.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  bool sweep = false, quick = false, baselines = true;
  std::vector<long long> profile;  // m n k block_n multicast(0 none, 1 A, 2 B)
  std::vector<long long> mcdiag;   // m n k block_n
  std::vector<long long> lt;       // m n k
  std::string only;
  int reps = 20;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    if (s == "--sweep") sweep = true;
    else if (s == "--quick") quick = true;
    else if (s == "--no-baselines") baselines = false;
    else if (s == "--only" && i + 1 < argc) only = argv[++i];
    else if (s == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (s == "--experiments") g_experiments = true;
    else if (s == "--exp" && i + 1 < argc) {
      g_experiments = true;
      std::string list = argv[++i];
      for (size_t pos = 0; pos <= list.size();) {
        const size_t comma = std::min(list.find(',', pos), list.size());
        if (comma > pos) g_exp_names.push_back(list.substr(pos, comma - pos));
        pos = comma + 1;
      }
    }
    else if (s == "--split-sweep") g_split_sweep = true;
    else if (s == "--floor") g_floor = true;
    else if (s == "--clean-flush") g_clean_flush = true;
    else if (s == "--rows192") g_rows192 = true;
    else if (s == "--data" && i + 1 < argc) g_tri_data = std::string(argv[++i]) == "tri";
    else if (s == "--lt" && i + 3 < argc) {
      lt = {std::atoll(argv[i + 1]), std::atoll(argv[i + 2]), std::atoll(argv[i + 3])};
      i += 3;
    }
    else if (s == "--mcdiag" && i + 4 < argc) {
      mcdiag = {std::atoll(argv[i + 1]), std::atoll(argv[i + 2]), std::atoll(argv[i + 3]), std::atoll(argv[i + 4])};
      i += 4;
    }
    else if (s == "--profile" && i + 5 < argc) {  // one dense shape, one config, a few launches (for ncu)
      profile = {std::atoll(argv[i + 1]), std::atoll(argv[i + 2]), std::atoll(argv[i + 3]), std::atoll(argv[i + 4]),
                 std::atoll(argv[i + 5])};
      i += 5;
    }
    else {
      std::fprintf(stderr,
                   "usage: h8_bench [--sweep] [--split-sweep] [--floor] [--clean-flush] [--rows192] [--quick] [--no-baselines] [--experiments] [--exp NAME,...] [--only dense|grouped|wgrad]"
                   " [--reps N] [--data uniform|tri] [--profile M N K BLOCK_N MC] [--mcdiag M N K BLOCK_N] [--lt M N K]\n");
      return 2;
    }
  }
  try {
    int dev_count = 0;
    if (cudaGetDeviceCount(&dev_count) != cudaSuccess || dev_count == 0) {
      std::printf("h8_bench: no CUDA device\n");
      return 77;
    }
    cudaDeviceProp prop{};
    CK(cudaGetDeviceProperties(&prop, 0));
    g_num_sms = prop.multiProcessorCount;
    std::printf("device %s, %d SMs, L2 %d MiB, %s\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20,
                cublaslt_version().c_str());
    if (!profile.empty()) return profile_dense(profile);
    if (!lt.empty()) return lt_profile(lt);
    Timing timing;
    timing.reps = reps;
    timing.clean = g_clean_flush;
    timing.num_sms = g_num_sms;
    if (!mcdiag.empty()) return mcdiag_dense(timing, mcdiag);
    if (only.empty() || only == "dense") {
      std::vector<std::pair<int64_t, int64_t>> nk = {{2112, 7168}, {24576, 1536}, {32768, 512},
                                                     {7168, 16384}, {4096, 7168}, {7168, 2048}};
      for (int64_t m : {int64_t{128}, int64_t{4096}})
        for (auto [n, k] : nk) {
          if (quick && m == 128 && n != 7168) continue;
          if ((g_split_sweep || g_floor) && m > 256) continue;
          bench_dense(timing, m, n, k, sweep, baselines);
        }
      if (!quick && !g_split_sweep && !g_floor) bench_dense(timing, 8192, 8192, 8192, sweep, baselines);
    }
    if (only.empty() || only == "grouped") {
      bench_grouped(timing, std::vector<int>(8, 4096), 4096, 7168, sweep);
      if (!quick) bench_grouped(timing, {3900, 4300, 0, 4100, 5000, 3000, 4600, 4700}, 4096, 7168, false);
    }
    if (only.empty() || only == "wgrad") {
      bench_wgrad(timing, 7168, 2048, {16384}, sweep, baselines);
      if (!quick) bench_wgrad(timing, 4096, 7168, std::vector<int>(8, 2048), false, false);
    }
    print_table();
  } catch (const std::exception& e) {
    std::printf("h8_bench failed: %s\n", e.what());
    print_table();
    return 1;
  }
  return 0;
}
