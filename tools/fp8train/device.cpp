// Choosing and starting the device a command computes on (commands.h: start_device).
#include <string>

#include "commands.h"
#include "common/error.h"
#include "dist/bootstrap.h"
#ifdef FP8TRAIN_HAVE_CUDA
#include "ops/cuda/kernels.h"
#include "tensor/cuda/device.h"
#endif

namespace fp8train::cli {
namespace {
std::string& chosen() {
  static std::string device = "cpu";
  return device;
}
}  // namespace

const std::string& started_device() { return chosen(); }

bool hopper_gpu_visible() {
#ifdef FP8TRAIN_HAVE_CUDA
  dist::pin_local_gpu();  // before CUDA starts: a rank of several per node sees only its own GPU
  return fp8train::cuda::device_count() > 0 && fp8train::cuda::device_info(0).cc_major == 9;
#else
  return false;
#endif
}

std::string start_device(const std::string& wanted) {
  FP8T_CHECK(wanted == "auto" || wanted == "cpu" || wanted == "cuda",
             "device '{}' is not one of auto, cpu, cuda", wanted);
  if (wanted == "cpu") return chosen() = "cpu";
#ifdef FP8TRAIN_HAVE_CUDA
  dist::pin_local_gpu();
  const int count = fp8train::cuda::device_count();
  if (wanted == "auto") {
    if (count == 0 || fp8train::cuda::device_info(0).cc_major != 9) return chosen() = "cpu";
  } else {
    FP8T_CHECK(count > 0, "--device cuda: no CUDA device is visible (check nvidia-smi and CUDA_VISIBLE_DEVICES), "
                          "or run with --device cpu");
  }
  fp8train::cuda::select_device(0);
  fp8train::cuda::require_hopper("--device cuda");
  ops::cuda::init(0, /*make_default=*/true);
  return chosen() = "cuda";
#else
  FP8T_CHECK(wanted != "cuda",
             "--device cuda: this fp8train was built without the CUDA backend (configure it with nvcc on the PATH)");
  return chosen() = "cpu";
#endif
}

}  // namespace fp8train::cli
