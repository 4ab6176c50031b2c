// ExecCtx (see exec_ctx.h).
#include "tensor/exec_ctx.h"

namespace fp8train {

ExecCtx ExecCtx::on(Device device) {
  ExecCtx c;
  c.device = device;
  c.stream = backend(device).stream();
  return c;
}

const ExecCtx& ExecCtx::cpu() {
  static const ExecCtx c;
  return c;
}

void ExecCtx::synchronize() const { backend(device).synchronize(); }

}  // namespace fp8train
