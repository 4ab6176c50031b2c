// ExecCtx (see exec_ctx.h).
#include "tensor/exec_ctx.h"

namespace fp8train {

void OpProfile::add(std::string_view op, double seconds) {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(op);
  if (it == entries_.end()) it = entries_.emplace(std::string(op), Entry{}).first;
  it->second.seconds += seconds;
  ++it->second.calls;
}

std::map<std::string, OpProfile::Entry> OpProfile::entries() const {
  std::lock_guard lock(mutex_);
  return {entries_.begin(), entries_.end()};
}

void OpProfile::clear() {
  std::lock_guard lock(mutex_);
  entries_.clear();
}

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

// This context's queue, which with_stream may have made another than the backend's default one.
void ExecCtx::synchronize() const { backend(device).synchronize_queue(stream); }

}  // namespace fp8train
