// main() of test_cuda (ctest `gpu_tests`, label gpu): exits with 77 — ctest's SKIP_RETURN_CODE for this test —
// and a sentence saying why when there is no usable CUDA device or it is not a Hopper GPU (the kernels are
// built for sm_90a only), so a machine without a GPU reports SKIPPED, never a pass. Otherwise it starts the
// CUDA backend on device 0 and runs every GoogleTest in tests/cuda/.
#include <gtest/gtest.h>

#include <cstdio>

#include "ops/cuda/kernels.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/device.h"

namespace {
constexpr int kSkipCode = 77;
}

int main(int argc, char** argv) {
  const int devices = fp8train::cuda::device_count();
  if (devices == 0) {
    std::printf("gpu_tests SKIPPED: no CUDA device is present (no driver or no GPU on this machine)\n");
    return kSkipCode;
  }
  const fp8train::cuda::DeviceInfo info = fp8train::cuda::device_info(0);
  if (info.cc_major != 9 || info.cc_minor != 0) {
    std::printf("gpu_tests SKIPPED: device 0 is %s; the kernels are built for sm_90a (H100/H200) only\n",
                info.describe().c_str());
    return kSkipCode;
  }
  std::printf("gpu_tests on %s\n", info.describe().c_str());
  fp8train::ops::cuda::init(0);  // the CUDA backend and its op table
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
