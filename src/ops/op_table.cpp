// The per-device op tables (see op_table.h).
#include "ops/op_table.h"

#include <mutex>

#include "common/error.h"
#include "ops/cpu/kernels.h"

namespace fp8train::ops {

namespace {
struct TableRegistry {
  std::mutex mutex;
  const OpTable* cuda = nullptr;
};
TableRegistry& registry() {
  static TableRegistry r;
  return r;
}
}  // namespace

const OpTable& op_table(DeviceType type) {
  if (type == DeviceType::CPU) return cpu::cpu_op_table();
  TableRegistry& r = registry();
  std::lock_guard lock(r.mutex);
  FP8T_CHECK(r.cuda != nullptr, "no ops are registered for CUDA devices (initialize the CUDA backend at start-up)");
  return *r.cuda;
}

bool has_op_table(DeviceType type) {
  if (type == DeviceType::CPU) return true;
  TableRegistry& r = registry();
  std::lock_guard lock(r.mutex);
  return r.cuda != nullptr;
}

void register_op_table(DeviceType type, const OpTable* table) {
  FP8T_CHECK(type != DeviceType::CPU, "the CPU op table is built in and cannot be replaced");
  FP8T_CHECK(table != nullptr, "register_op_table: null table");
  TableRegistry& r = registry();
  std::lock_guard lock(r.mutex);
  r.cuda = table;
}

void throw_not_implemented(std::string_view op, const ExecCtx& ctx) {
  FP8T_FAIL("op {} is not implemented on {} (the {} backend has no kernel for it)", op, ctx.device.str(),
            ctx.device.is_cpu() ? "cpu" : "cuda");
}

}  // namespace fp8train::ops
