// The NCCL entry points of a build without NCCL (the real ones are in cuda/nccl_communicator.cpp).
#include "dist/nccl_communicator.h"

#ifndef FP8TRAIN_HAVE_NCCL
#include "common/error.h"

namespace fp8train::dist {
namespace {
[[noreturn]] void no_nccl() {
  FP8T_FAIL(
      "this fp8train was built without NCCL (it needs the CUDA backend and the CUDA toolkit's nccl.h): GPU "
      "ranks cannot communicate");
}
}  // namespace
bool nccl_available() { return false; }
std::string nccl_unique_id() { no_nccl(); }
std::unique_ptr<Communicator> nccl_world(const std::string&, int, int, CommOptions) { no_nccl(); }
}  // namespace fp8train::dist
#endif
