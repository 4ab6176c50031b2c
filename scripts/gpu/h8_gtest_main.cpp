// main() of the standalone GPU test binary that scripts/gpu/h8_build.sh links for runs on the H200 (the
// CMake test_cuda uses tests/cuda/gpu_test_main.cpp instead): exits 77 with a sentence when there is no
// CUDA device or it is not sm_90, else runs the GoogleTests compiled in (tests/cuda/fp8_gemm_*_test.cpp).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdio>

int main(int argc, char** argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("h8 gpu tests SKIPPED: no CUDA device\n");
    return 77;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess || prop.major != 9 || prop.minor != 0) {
    std::printf("h8 gpu tests SKIPPED: device 0 is not sm_90\n");
    return 77;
  }
  std::printf("h8 gpu tests on %s (%d SMs)\n", prop.name, prop.multiProcessorCount);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
