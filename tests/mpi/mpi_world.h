// The world communicator of test_mpi (mpi_test_main.cpp starts MPI), shared by its test files. Tests that count
// traffic reset its stats first.
#pragma once
#include <memory>

#include "dist/mpi_communicator.h"

inline fp8train::dist::Communicator& world() {
  static std::unique_ptr<fp8train::dist::Communicator> w =
      fp8train::dist::mpi_world(fp8train::dist::CommOptions{.timeout_seconds = 60});
  return *w;
}
