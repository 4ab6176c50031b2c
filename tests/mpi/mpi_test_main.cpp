// main() of test_mpi (ctest label `mpi`): run under `mpiexec -np N` (tests/CMakeLists.txt registers N = 2 and 4). It
// starts MPI and runs every test on every rank; a test's collectives are matched across ranks, so every rank must
// run the same tests in the same order (no --gtest_filter that differs between ranks). Only rank 0 prints the
// GoogleTest report; a failure on any rank makes that rank, and so mpiexec, exit non-zero.
#include <gtest/gtest.h>

#include "dist/mpi_communicator.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  fp8train::dist::mpi_init();
  auto world = fp8train::dist::mpi_world();
  if (world->rank() != 0) {
    // Failures on other ranks still print (a listener that reports only failures would be nicer; the exit code
    // carries them either way).
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  world.reset();
  return RUN_ALL_TESTS();
}
