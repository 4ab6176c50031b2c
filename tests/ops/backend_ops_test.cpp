// The backend test table (backend_ops_table.h) on the CPU: every row's CPU op against its reference (the quant/
// reference functions, or an FP64 evaluation), on fresh random inputs whose seed is printed, with the outputs the op
// allocates poisoned first. The CUDA half (tests/cuda/backend_ops_gpu_test.cpp) runs the same rows on a GPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "backend_ops_table.h"
#include "tensor/backend.h"

namespace fp8train::backend_test {
namespace {

// Drop the CPU allocator's cached blocks, then hand blocks of the requested sizes back to it filled with 0xA5:
// the op's next allocations of those sizes reuse them.
void poison_cpu(Device device, const std::vector<size_t>& bytes) {
  if (!device.is_cpu()) return;
  auto* cpu = dynamic_cast<CpuAllocator*>(&backend(device).allocator());
  if (cpu == nullptr) return;
  cpu->release_cached();
  std::vector<Tensor> blocks;
  for (size_t n : bytes) {
    blocks.push_back(Tensor::empty({static_cast<int64_t>(n)}, DType::U8, MemCategory::Workspace, device));
    std::memset(blocks.back().raw(), 0xA5, n);
  }
}

uint64_t fresh_seed() { return std::random_device{}(); }

TEST(BackendOps, EveryRowMatchesItsReferenceOnTheCpu) {
  poison_hook() = poison_cpu;
  const std::vector<BackendOpCase> cases = backend_cases();
  ASSERT_GT(cases.size(), 50u);
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  int failed = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const BackendOpCase& c = cases[i];
    const uint64_t s = seed + 1000 * i;
    const std::string diff = compare_results(c.run(ExecCtx::cpu(), s), c.reference(s), c.cpu);
    if (!diff.empty()) {
      ++failed;
      ADD_FAILURE() << c.op << " " << c.name << " (seed " << s << "): " << diff;
    }
  }
  std::printf("backend ops on cpu: %zu rows, %d failed\n", cases.size(), failed);
  poison_hook() = nullptr;
}

TEST(BackendOps, TheComparisonsCanFail) {
  const OpResult a{"x", {1, 2, 3}, {1.0f, 2.0f}};
  OpResult b = a;
  EXPECT_EQ(compare_results({a}, {b}, Compare::bits()), "");
  b.bytes[1] = 9;
  EXPECT_NE(compare_results({a}, {b}, Compare::bits()), "");
  b = a;
  b.floats[1] = 2.0000002f;
  EXPECT_NE(compare_results({a}, {b}, Compare::bits()), "");
  EXPECT_EQ(compare_results({a}, {b}, Compare::normalized(1e-6)), "");
  b.floats[1] = 3.0f;
  EXPECT_NE(compare_results({a}, {b}, Compare::normalized(1e-6)), "");
  EXPECT_NE(compare_results({a}, {}, Compare::bits()), "");
  // FP64 values carried as bytes, compared within a relative bound.
  auto f64 = [](std::vector<double> d) {
    OpResult r{"d", std::vector<uint8_t>(d.size() * sizeof(double)), {}};
    std::memcpy(r.bytes.data(), d.data(), r.bytes.size());
    return r;
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(compare_results({f64({1.0, 2.0, nan})}, {f64({1.0, 2.0 * (1 + 1e-14), nan})}, Compare::f64_within(1e-12)),
            "");
  EXPECT_NE(compare_results({f64({1.0, 2.0})}, {f64({1.0, 2.0 * (1 + 1e-10)})}, Compare::f64_within(1e-12)), "");
  EXPECT_NE(compare_results({f64({1.0, nan})}, {f64({1.0, 2.0})}, Compare::f64_within(1e-12)), "");
  EXPECT_NE(compare_results({f64({1.0, 2.0})}, {f64({1.0, 2.0 * (1 + 1e-14)})}, Compare::bits()), "");
}

}  // namespace
}  // namespace fp8train::backend_test
