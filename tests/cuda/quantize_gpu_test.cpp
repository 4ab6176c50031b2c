// The CUDA quantizer launchers against the CPU ops of the same name (ops::quantize / dequantize / quantize_delayed
// on the CPU, the exact arithmetic of quant/):
// exact equality of every code byte and every scale (NaN equal to NaN), on fresh random inputs whose row and
// band magnitudes span six decades, with poisoned outputs, for F32 and BF16 inputs, E4M3/E5M2/INT8 (nearest
// and stochastic), E5M6, online and power-of-two scales, both encoders, both scale layouts, aligned and
// ragged shapes, and special values (NaN, Inf, all-zero blocks, float32 subnormals, huge values).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "ops/cuda/quantize_cuda.h"
#include "ops/quantize.h"
#include "quant/quant.h"

namespace fp8train::gputest {
namespace {

using ops::cuda::Encoder;
using ops::cuda::InType;
using ops::cuda::ScaleStrides;

// An input matrix as the GPU gets it (F32 or BF16 codes) and as the CPU reference sees it (float32).
struct Input {
  int64_t rows, cols;
  InType type;
  std::vector<float> ref;
  DeviceArray<float> f32{0};
  DeviceArray<uint16_t> bf16{0};
  const void* device() const { return type == InType::F32 ? static_cast<const void*>(f32.get()) : bf16.get(); }
};

Input make_input(int64_t rows, int64_t cols, InType type, std::vector<float> values) {
  Input in{rows, cols, type, {}, DeviceArray<float>(0), DeviceArray<uint16_t>(0)};
  if (type == InType::BF16) {
    const auto codes = to_bf16(values);
    in.ref = from_bf16(codes);
    in.bf16 = DeviceArray<uint16_t>(codes);
  } else {
    in.ref = values;
    in.f32 = DeviceArray<float>(values);
  }
  return in;
}

quant::QuantSpec cpu_config(const ops::cuda::QuantOptions& o, quant::Granularity g) {
  quant::QuantSpec c;
  c.format = o.format;
  c.granularity = g;
  c.scale_mode = o.pow2_scales ? quant::ScaleMode::PowerOfTwo : quant::ScaleMode::Amax;
  c.rounding = o.stochastic ? quant::Rounding::Stochastic : quant::Rounding::Nearest;
  c.seed = o.seed;
  return c;
}

// The CPU op of the same name on the reference values.
quant::QTensor cpu_quantize(const std::vector<float>& x, int64_t rows, int64_t cols, const quant::QuantSpec& spec,
                            ops::QuantizeOutputs outputs = ops::QuantizeOutputs::Rowwise) {
  const Tensor t = Tensor::from_vector(x, {rows, cols}, MemCategory::Workspace, Device::cpu());
  return ops::quantize(ExecCtx::cpu(), t, spec, outputs);
}

// Scales read back in `strides` order, rearranged into the CPU's row-major [srows, scols].
std::vector<float> to_row_major(const std::vector<float>& got, ScaleStrides s, int64_t srows, int64_t scols) {
  std::vector<float> out(static_cast<size_t>(srows * scols));
  for (int64_t r = 0; r < srows; ++r)
    for (int64_t c = 0; c < scols; ++c) out[r * scols + c] = got[r * s.row + c * s.col];
  return out;
}
int64_t scale_extent(ScaleStrides s, int64_t srows, int64_t scols) {
  return (srows - 1) * s.row + (scols - 1) * s.col + 1;
}

void expect_same(const quant::QTensor& want, const std::vector<uint8_t>& codes, const std::vector<float>& scales,
                 const std::string& what) {
  std::string first;
  EXPECT_EQ(count_mismatches(codes, want.code_vector(), &first), 0) << what << " codes; first: " << first;
  first.clear();
  EXPECT_EQ(count_float_mismatches(scales, want.row_major_scales(), &first), 0) << what << " scales; first: " << first;
}

struct Variant {
  quant::Format format;
  Encoder encoder;
  bool stochastic;
  const char* name;
};
const Variant kVariants[] = {
    {quant::Format::E4M3, Encoder::Hardware, false, "e4m3/hw"}, {quant::Format::E4M3, Encoder::Software, false, "e4m3/sw"},
    {quant::Format::E5M2, Encoder::Hardware, false, "e5m2/hw"}, {quant::Format::E5M2, Encoder::Software, false, "e5m2/sw"},
    {quant::Format::INT8, Encoder::Hardware, false, "int8/rne"}, {quant::Format::INT8, Encoder::Hardware, true, "int8/sr"},
};

void run_1x128_case(const Input& in, const Variant& v, bool pow2, bool mn_major, uint64_t seed) {
  const int64_t rows = in.rows, cols = in.cols, kb = (cols + 127) / 128, rb = (rows + 127) / 128;
  ops::cuda::Quant1x128Args a;
  a.x = in.device();
  a.x_type = in.type;
  a.rows = rows;
  a.cols = cols;
  a.opt = {v.format, pow2, v.stochastic, seed, v.encoder};
  a.q_strides = mn_major ? ops::cuda::mn_major_scales(rows) : ops::cuda::row_major_scales(kb);
  a.qt_strides = mn_major ? ops::cuda::mn_major_scales(cols) : ops::cuda::row_major_scales(rb);
  DeviceArray<uint8_t> q(rows * cols), qt(rows * cols);
  DeviceArray<float> qs(scale_extent(a.q_strides, rows, kb)), qts(scale_extent(a.qt_strides, cols, rb));
  a.q = q.get();
  a.q_scales = qs.get();
  a.qt = qt.get();
  a.qt_scales = qts.get();
  ops::cuda::quantize_1x128(a, nullptr);

  const std::string what = std::string(v.name) + (pow2 ? " pow2" : " amax") + (mn_major ? " mn-major" : " row-major") +
                           (in.type == InType::BF16 ? " bf16" : " f32") + " [" + std::to_string(rows) + "x" +
                           std::to_string(cols) + "]";
  const quant::QTensor want =
      cpu_quantize(in.ref, rows, cols, cpu_config(a.opt, quant::Granularity::tile_1x128()), ops::QuantizeOutputs::Both);
  expect_same(want, q.download(), to_row_major(qs.download(), a.q_strides, rows, kb), what + " 1x128");
  expect_same(want.transposed(), qt.download(), to_row_major(qts.download(), a.qt_strides, cols, rb),
              what + " 128x1 transposed");

  // The same kernel with only one of the two outputs requested writes the same bytes.
  a.qt = nullptr;
  q.poison();
  ops::cuda::quantize_1x128(a, nullptr);
  std::string first;
  EXPECT_EQ(count_mismatches(q.download(), want.code_vector(), &first), 0) << what << " codes without qt; " << first;
}

TEST(QuantizeGpu, Fused1x128And128x1MatchCpuBitForBit) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const std::pair<int64_t, int64_t> shapes[] = {{256, 512}, {272, 400}};
  int s = 0;
  for (auto [rows, cols] : shapes)
    for (InType type : {InType::F32, InType::BF16}) {
      const Input in = make_input(rows, cols, type, random_matrix(rows, cols, seed + s++));
      for (const Variant& v : kVariants)
        for (bool pow2 : {false, true}) run_1x128_case(in, v, pow2, (s + pow2) % 2 == 0, seed + 1000 + s);
    }
}

TEST(QuantizeGpu, Fused1x128HandlesSpecialValues) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t rows = 256, cols = 384;
  std::vector<float> x = random_matrix(rows, cols, seed);
  for (int64_t c = 0; c < 128; ++c) x[0 * cols + c] = 0.0f;                  // an all-zero 1x128 tile
  for (int64_t r = 128; r < 256; ++r) x[r * cols + 130] = 0.0f;             // an all-zero 128x1 column
  x[5 * cols + 7] = std::numeric_limits<float>::quiet_NaN();                 // NaN row tile and column
  x[9 * cols + 200] = std::numeric_limits<float>::infinity();                // Inf
  x[10 * cols + 300] = -std::numeric_limits<float>::infinity();
  for (int64_t c = 256; c < 384; ++c) x[20 * cols + c] = 1e-40f * (c - 300);  // float32 subnormals only
  for (int64_t c = 0; c < 128; ++c) x[30 * cols + c] = 3e38f * ((c % 3) - 1.0f);  // near FLT_MAX
  for (InType type : {InType::F32, InType::BF16}) {
    const Input in = make_input(rows, cols, type, x);
    for (const Variant& v : kVariants)
      for (bool pow2 : {false, true}) run_1x128_case(in, v, pow2, false, seed + 7);
  }
}

TEST(QuantizeGpu, Block128x128AndTransposeMatchCpu) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const std::pair<int64_t, int64_t> shapes[] = {{384, 256}, {272, 400}, {128, 640}};
  int s = 0;
  for (auto [rows, cols] : shapes)
    for (InType type : {InType::F32, InType::BF16})
      for (const Variant& v : kVariants)
        for (bool pow2 : {false, true}) {
          const Input in = make_input(rows, cols, type, random_matrix(rows, cols, seed + s++));
          const int64_t rb = (rows + 127) / 128, kb = (cols + 127) / 128;
          ops::cuda::Quant128x128Args a;
          a.x = in.device();
          a.x_type = type;
          a.rows = rows;
          a.cols = cols;
          a.opt = {v.format, pow2, v.stochastic, seed + s, v.encoder};
          a.q_strides = {(kb + 3) / 4 * 4, 1};  // cuBLASLt's padded pitch
          a.qt_strides = ops::cuda::row_major_scales(rb);
          DeviceArray<uint8_t> q(rows * cols), qt(rows * cols);
          DeviceArray<float> qs(scale_extent(a.q_strides, rb, kb)), qts(kb * rb);
          a.q = q.get();
          a.q_scales = qs.get();
          a.qt = qt.get();
          a.qt_scales = qts.get();
          ops::cuda::quantize_128x128(a, nullptr);
          const std::string what = std::string(v.name) + (pow2 ? " pow2 " : " amax ") + std::to_string(rows) + "x" +
                                   std::to_string(cols) + (type == InType::BF16 ? " bf16" : " f32");
          const quant::QTensor want = cpu_quantize(in.ref, rows, cols, cpu_config(a.opt, quant::Granularity::block_128x128()),
                                                   ops::QuantizeOutputs::Both);
          expect_same(want, q.download(), to_row_major(qs.download(), a.q_strides, rb, kb), what + " 128x128");
          expect_same(want.transposed(), qt.download(), to_row_major(qts.download(), a.qt_strides, kb, rb),
                      what + " transposed");
        }
}

TEST(QuantizeGpu, GenericBlocksAnyShapeMatchCpu) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const quant::Granularity grans[] = {quant::Granularity::tile_1x128(), quant::Granularity::tile_128x1(),
                                      quant::Granularity::block(32, 64), quant::Granularity::block_128x128(),
                                      quant::Granularity::tensor()};
  int s = 0;
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{37, 300}, {300, 129}})
    for (InType type : {InType::F32, InType::BF16})
      for (const auto& g : grans)
        for (const Variant& v : kVariants) {
          const Input in = make_input(rows, cols, type, random_matrix(rows, cols, seed + s++));
          const bool pow2 = s % 2 == 0;
          ops::cuda::QuantBlocksArgs a;
          a.x = in.device();
          a.x_type = type;
          a.rows = rows;
          a.cols = cols;
          a.block_rows = g.block_rows;
          a.block_cols = g.block_cols;
          a.opt = {v.format, pow2, v.stochastic, seed + s, v.encoder};
          const int64_t sr = g.scale_rows(rows), sc = g.scale_cols(cols);
          a.strides = ops::cuda::row_major_scales(sc);
          DeviceArray<uint8_t> q(rows * cols);
          DeviceArray<float> qs(sr * sc);
          DeviceArray<uint32_t> scratch(4);
          a.q = q.get();
          a.scales = qs.get();
          a.amax_scratch = scratch.get();
          ops::cuda::quantize_blocks(a, nullptr);
          const quant::QTensor want = cpu_quantize(in.ref, rows, cols, cpu_config(a.opt, g));
          expect_same(want, q.download(), qs.download(),
                      std::string(v.name) + " " + g.name() + " " + std::to_string(rows) + "x" + std::to_string(cols));
        }
}

TEST(QuantizeGpu, E5M6PackAndUnpackMatchCpu) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  int s = 0;
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{256, 384}, {100, 200}, {37, 656}})
    for (InType type : {InType::F32, InType::BF16})
      for (bool pow2 : {true, false}) {
        const Input in = make_input(rows, cols, type, random_matrix(rows, cols, seed + s++));
        const int64_t kb = (cols + 127) / 128;
        ops::cuda::QuantE5M6Args a;
        a.x = in.device();
        a.x_type = type;
        a.rows = rows;
        a.cols = cols;
        a.pow2_scales = pow2;
        a.strides = ops::cuda::row_major_scales(kb);
        DeviceArray<uint8_t> packed(quant::code_bytes(quant::Format::E5M6, rows * cols));
        DeviceArray<float> qs(rows * kb);
        a.packed = packed.get();
        a.scales = qs.get();
        ops::cuda::quantize_e5m6_1x128(a, nullptr);
        quant::QuantSpec c;
        c.format = quant::Format::E5M6;
        c.granularity = quant::Granularity::tile_1x128();
        c.scale_mode = pow2 ? quant::ScaleMode::PowerOfTwo : quant::ScaleMode::Amax;
        const quant::QTensor want = cpu_quantize(in.ref, rows, cols, c);
        const std::string what = std::string("e5m6 ") + (pow2 ? "pow2 " : "amax ") + std::to_string(rows) + "x" +
                                 std::to_string(cols);
        expect_same(want, packed.download(), qs.download(), what);

        const std::vector<float> deq = ops::dequantize(ExecCtx::cpu(), want, DType::F32).to_vector<float>();
        DeviceArray<float> out32(rows * cols);
        DeviceArray<uint16_t> out16(rows * cols);
        ops::cuda::dequantize_e5m6_1x128(packed.get(), qs.get(), a.strides, rows, cols, out32.get(), InType::F32, nullptr);
        ops::cuda::dequantize_e5m6_1x128(packed.get(), qs.get(), a.strides, rows, cols, out16.get(), InType::BF16,
                                         nullptr);
        std::string first;
        EXPECT_EQ(count_float_mismatches(out32.download(), deq, &first), 0) << what << " unpack f32; " << first;
        EXPECT_EQ(count_mismatches(out16.download(), to_bf16(deq), &first), 0) << what << " unpack bf16; " << first;
      }
}

// ops::cuda::dequantize of q (its block grid, row-major scales) to FP32 and to BF16.
struct DequantOut {
  std::vector<float> f32;
  std::vector<uint16_t> bf16;
};
DequantOut gpu_dequantize(const quant::QTensor& q, quant::Format f) {
  DeviceArray<uint8_t> codes(q.code_vector());
  DeviceArray<float> scales(q.row_major_scales());
  ops::cuda::DequantArgs a;
  a.q = codes.get();
  a.format = f;
  a.rows = q.rows;
  a.cols = q.cols;
  a.block_rows = q.granularity().block_rows;
  a.block_cols = q.granularity().block_cols;
  a.scales = scales.get();
  a.strides = ops::cuda::row_major_scales(q.scale_cols());
  DeviceArray<float> out32(q.rows * q.cols);
  DeviceArray<uint16_t> out16(q.rows * q.cols);
  a.out = out32.get();
  a.out_type = InType::F32;
  ops::cuda::dequantize(a, nullptr);
  a.out = out16.get();
  a.out_type = InType::BF16;
  ops::cuda::dequantize(a, nullptr);
  return {out32.download(), out16.download()};
}

TEST(QuantizeGpu, DequantizeMatchesCpu) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const quant::Granularity grans[] = {quant::Granularity::tile_1x128(), quant::Granularity::block_128x128(),
                                      quant::Granularity::tensor(), quant::Granularity::block(4, 12),
                                      quant::Granularity::tile_128x1()};
  int s = 0;
  for (const auto& g : grans)
    for (quant::Format f : {quant::Format::E4M3, quant::Format::E5M2, quant::Format::INT8})
    for (int64_t cols : {int64_t{264}, int64_t{272}}) {  // 8 per thread; coalesced (cols % 16 == 0)
      const int64_t rows = 200;
      const std::vector<float> x = random_matrix(rows, cols, seed + s++);
      ops::cuda::QuantOptions o{f, s % 2 == 0, false, 0, Encoder::Hardware};
      const quant::QTensor q = cpu_quantize(x, rows, cols, cpu_config(o, g));
      const DequantOut got = gpu_dequantize(q, f);
      const std::vector<float> want = ops::dequantize(ExecCtx::cpu(), q, DType::F32).to_vector<float>();
      std::string first;
      EXPECT_EQ(count_float_mismatches(got.f32, want, &first), 0) << g.name() << " " << cols << " f32 " << first;
      EXPECT_EQ(count_mismatches(got.bf16, to_bf16(want), &first), 0) << g.name() << " " << cols << " bf16 " << first;
    }
}

// Every code of each 1-byte format (NaN, Inf, subnormals, both zeros), through the coalesced path
// (cols % 16 == 0, with full and partial warp segments) and the 8-per-thread path (cols % 16 != 0).
TEST(QuantizeGpu, DequantizeEveryCodeMatchesCpu) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> scale(0.01f, 100.0f);
  for (quant::Format f : {quant::Format::E4M3, quant::Format::E5M2, quant::Format::INT8})
    for (int64_t cols : {int64_t{512}, int64_t{400}, int64_t{264}}) {
      const int64_t rows = 9;
      quant::QuantSpec spec;
      spec.format = f;
      spec.granularity = quant::Granularity::tile_1x128();
      quant::QTensor q = quant::QTensor::empty(spec, rows, cols, 1, true, false, quant::ScaleLayout::RowMajor,
                                               Device::cpu());
      for (int64_t i = 0; i < rows * cols; ++i) q.code_ptr()[i] = static_cast<uint8_t>((i * 7 + i / cols) & 0xFF);
      for (int64_t i = 0; i < q.rowwise.scales.numel(); ++i) q.scale_ptr()[i] = scale(gen);
      const DequantOut got = gpu_dequantize(q, f);
      // Bitwise equal except NaN payloads: the GPU's multiply by the scale returns the canonical NaN where the
      // CPU's keeps the code's sign and payload (measured on the H200, docs/gpu.md), so NaN only has to stay NaN.
      const std::vector<float> want = ops::dequantize(ExecCtx::cpu(), q, DType::F32).to_vector<float>();
      std::string first;
      EXPECT_EQ(count_float_mismatches(got.f32, want, &first), 0)
          << static_cast<int>(f) << " cols " << cols << " f32 " << first;
      EXPECT_EQ(count_float_mismatches(from_bf16(got.bf16), from_bf16(to_bf16(want)), &first), 0)
          << static_cast<int>(f) << " cols " << cols << " bf16 " << first;
    }
}

TEST(QuantizeGpu, AmaxPropagatesNaNAndMatchesCpu) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (int64_t n : {int64_t{1} << 20, int64_t{1000003}}) {
    std::vector<float> x = random_matrix(1, n, seed + n);
    DeviceArray<float> dx(x);
    DeviceArray<uint32_t> amax(std::vector<uint32_t>{0});
    ops::cuda::amax_accumulate(dx.get(), InType::F32, n, amax.get(), nullptr);
    const uint32_t got = amax.download()[0];
    float gotf;
    std::memcpy(&gotf, &got, 4);
    EXPECT_TRUE(same_float(gotf, quant::amax_of(x.data(), n))) << n;
    x[n / 3] = std::numeric_limits<float>::quiet_NaN();
    dx.upload(x);
    amax.upload({0});
    ops::cuda::amax_accumulate(dx.get(), InType::F32, n, amax.get(), nullptr);
    const uint32_t nan_bits = amax.download()[0];
    std::memcpy(&gotf, &nan_bits, 4);
    EXPECT_TRUE(std::isnan(gotf));
  }
}

TEST(QuantizeGpu, DelayedScalingFollowsTheCpuAmaxHistory) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t rows = 96, cols = 160;
  for (bool most_recent : {false, true})
    for (int margin : {0, 2, -1})
      for (quant::Format f : {quant::Format::E4M3, quant::Format::E5M2})
        for (bool pow2 : {false, true}) {
          const int length = 3;
          ops::AmaxHistoryState cpu = ops::AmaxHistoryState::make(
              ExecCtx::cpu(), length, most_recent ? quant::AmaxAlgorithm::MostRecent : quant::AmaxAlgorithm::Max, margin);
          DeviceArray<float> entries(std::vector<float>(length, 0.0f));
          DeviceArray<int32_t> state(std::vector<int32_t>{0, 0, 0});
          ops::cuda::DeviceAmaxHistoryView h{entries.get(), state.get(), length, most_recent, margin};
          DeviceArray<float> scale_inverse(2), scale_out(1);
          DeviceArray<uint32_t> amax(1);
          ops::cuda::QuantOptions o{f, pow2, false, 0, Encoder::Hardware};
          for (int step = 0; step < 6; ++step) {
            const std::vector<float> x = random_matrix(rows, cols, seed + 31 * step + margin, 2.0f);
            const Input in = make_input(rows, cols, InType::F32, x);
            DeviceArray<uint8_t> q(rows * cols);
            ops::cuda::delayed_compute_scale(h, f, pow2, scale_inverse.get(), nullptr);
            amax.upload({0});
            ops::cuda::QuantWithScaleArgs a;
            a.x = in.device();
            a.x_type = InType::F32;
            a.rows = rows;
            a.cols = cols;
            a.opt = o;
            a.scale_inverse = scale_inverse.get();
            a.q = q.get();
            a.scale_out = scale_out.get();
            a.amax_bits = amax.get();
            ops::cuda::quantize_with_scale(a, nullptr);
            ops::cuda::delayed_push_amax(h, amax.get(), nullptr);
            const Tensor xh = Tensor::from_vector(x, {rows, cols}, MemCategory::Workspace, Device::cpu());
            const quant::QTensor want =
                ops::quantize_delayed(ExecCtx::cpu(), xh, cpu_config(o, quant::Granularity::tensor()), cpu);
            expect_same(want, q.download(), scale_out.download(),
                        "delayed step " + std::to_string(step) + (most_recent ? " most-recent" : " max") +
                            " margin " + std::to_string(margin));
          }
          // A NaN tensor: the CPU refuses it; the device flags it and leaves its history as it was.
          std::vector<float> bad = random_matrix(rows, cols, seed + 99);
          bad[17] = std::numeric_limits<float>::quiet_NaN();
          const Tensor bad_h = Tensor::from_vector(bad, {rows, cols}, MemCategory::Workspace, Device::cpu());
          EXPECT_THROW(ops::quantize_delayed(ExecCtx::cpu(), bad_h, cpu_config(o, quant::Granularity::tensor()), cpu),
                       Error);
          const std::vector<float> window = cpu.window();
          const Input in = make_input(rows, cols, InType::F32, bad);
          amax.upload({0});
          ops::cuda::amax_accumulate(in.device(), InType::F32, rows * cols, amax.get(), nullptr);
          ops::cuda::delayed_push_amax(h, amax.get(), nullptr);
          const auto st = state.download();
          EXPECT_EQ(st[2], 1) << "the error flag was not raised";
          EXPECT_EQ(st[0], static_cast<int32_t>(window.size()));
          const auto e = entries.download();
          // The ring holds the CPU history's entries, oldest at position `next`.
          std::vector<float> ring(window.size());
          for (size_t i = 0; i < window.size(); ++i)
            ring[i] = e[(st[1] - static_cast<int32_t>(window.size()) + static_cast<int32_t>(i) + length) % length];
          EXPECT_EQ(count_float_mismatches(ring, window), 0);
        }
}

TEST(QuantizeGpu, BadArgumentsThrowClearErrors) {
  ops::cuda::Quant1x128Args a;
  a.rows = 128;
  a.cols = 100;  // not a multiple of 16
  DeviceArray<float> x(128 * 128);
  DeviceArray<uint8_t> q(128 * 128);
  DeviceArray<float> s(128);
  a.x = x.get();
  a.x_type = InType::F32;
  a.q = q.get();
  a.q_scales = s.get();
  try {
    ops::cuda::quantize_1x128(a, nullptr);
    FAIL() << "cols = 100 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of 16"), std::string::npos) << e.what();
  }
  a.cols = 128;
  a.opt.stochastic = true;  // E4M3
  EXPECT_THROW(ops::cuda::quantize_1x128(a, nullptr), Error);
  a.opt.stochastic = false;
  a.q_scales = nullptr;
  EXPECT_THROW(ops::cuda::quantize_1x128(a, nullptr), Error);
}

}  // namespace
}  // namespace fp8train::gputest
