#include "numerics/accum_vectors.h"

#include <cstring>
#include <fstream>
#include <iterator>

#include "common/error.h"
#include "numerics/hopper_accum.h"

namespace fp8train::num {

namespace {
uint32_t read_u32(const uint8_t* p) { return p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24); }
}  // namespace

AccumVector read_accum_vector(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  FP8T_CHECK(in.good(), "{}: cannot open file", path);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  constexpr size_t kHeader = 24;
  FP8T_CHECK(bytes.size() >= kHeader, "{}: truncated header ({} bytes, need {})", path, bytes.size(), kHeader);
  FP8T_CHECK(std::memcmp(bytes.data(), "FP8ACC01", 8) == 0, "{}: bad magic (expected FP8ACC01)", path);
  AccumVector v;
  v.m = read_u32(&bytes[8]);
  v.n = read_u32(&bytes[12]);
  v.k = read_u32(&bytes[16]);
  FP8T_CHECK(v.m > 0 && v.n > 0 && v.k > 0 && v.m <= (1u << 16) && v.n <= (1u << 16) && v.k <= (1u << 20),
             "{}: implausible shape M={} N={} K={}", path, v.m, v.n, v.k);
  FP8T_CHECK(bytes[20] <= 1 && bytes[21] <= 1, "{}: unknown operand format codes {} / {}", path, bytes[20], bytes[21]);
  FP8T_CHECK(bytes[22] <= 1, "{}: unknown mode {}", path, bytes[22]);
  v.format_a = bytes[20] == 0 ? Fp8Format::E4M3 : Fp8Format::E5M2;
  v.format_b = bytes[21] == 0 ? Fp8Format::E4M3 : Fp8Format::E5M2;
  v.promote = bytes[22] == 1;
  const uint64_t size_a = uint64_t{v.m} * v.k, size_b = uint64_t{v.n} * v.k, size_d = uint64_t{v.m} * v.n * 4;
  const uint64_t expected = kHeader + size_a + size_b + size_d;
  FP8T_CHECK(bytes.size() == expected, "{}: size {} bytes, but M={} N={} K={} need {} (truncated or padded)", path,
             bytes.size(), v.m, v.n, v.k, expected);
  const uint8_t* p = bytes.data() + kHeader;
  v.a.assign(p, p + size_a);
  v.b.assign(p + size_a, p + size_a + size_b);
  v.d.resize(uint64_t{v.m} * v.n);
  std::memcpy(v.d.data(), p + size_a + size_b, size_d);
  return v;
}

AccumCheck check_accum_vector(const AccumVector& v) {
  AccumCheck r;
  r.total = uint64_t{v.m} * v.n;
  const int interval = v.promote ? 128 : kNeverPromote;
  uint64_t matched = 0;
#pragma omp parallel for reduction(+ : matched) schedule(static)
  for (int64_t i = 0; i < static_cast<int64_t>(v.m); ++i) {
    for (uint32_t j = 0; j < v.n; ++j) {
      const float got = hopper_dot(&v.a[i * v.k], v.format_a, &v.b[uint64_t{j} * v.k], v.format_b,
                                   static_cast<int>(v.k), interval);
      const float want = v.d[i * v.n + j];
      if (float_bits(got) == float_bits(want)) ++matched;
    }
  }
  r.matched = matched;
  return r;
}

}  // namespace fp8train::num
