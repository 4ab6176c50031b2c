// ParamArenas::validate (see param.h).
#include "optim/param.h"

namespace fp8train::optim {

int64_t ParamArenas::local_expert_elements() const {
  int64_t n = 0;
  for (const ArenaLayout::View& v : layout().views())
    if (v.offset < experts.end) n += v.numel;
  return n;
}

void ParamArenas::validate() const {
  FP8T_CHECK(values.defined() && grads.defined(), "parameter arenas: values and gradients are required");
  FP8T_CHECK(values.layout_ptr() == grads.layout_ptr(),
             "parameter arenas: values and gradients have different layouts");
  FP8T_CHECK(values.dtype() == DType::F32 && grads.dtype() == DType::F32,
             "parameter arenas: the optimizer needs f32 values and gradients, got {} and {}",
             dtype_name(values.dtype()), dtype_name(grads.dtype()));
  FP8T_CHECK(values.device() == grads.device(), "parameter arenas: values on {} but gradients on {}",
             values.device().str(), grads.device().str());
  const int64_t n = layout().elements();
  for (const ArenaRange& r : {decay, no_decay})
    FP8T_CHECK(0 <= r.begin && r.begin <= r.end && r.end <= n, "parameter arenas: range [{}, {}) outside {} elements",
               r.begin, r.end, n);
  FP8T_CHECK(decay.empty() || no_decay.empty() || decay.end <= no_decay.begin || no_decay.end <= decay.begin,
             "parameter arenas: the decay range [{}, {}) overlaps the no-decay range [{}, {})", decay.begin, decay.end,
             no_decay.begin, no_decay.end);
  auto within = [](const ArenaRange& r, const ArenaLayout::View& v) {
    return v.offset >= r.begin && v.offset + v.numel <= r.end;
  };
  for (const ArenaLayout::View& v : layout().views())
    FP8T_CHECK(v.numel == 0 || within(decay, v) || within(no_decay, v),
               "parameter arenas: parameter '{}' lies in neither the decay nor the no-decay range", v.name);
  FP8T_CHECK(experts.empty() || (experts.begin == 0 && decay.begin == 0 && experts.end <= decay.end),
             "parameter arenas: the local experts' range [{}, {}) must be a prefix of the decay range [{}, {})",
             experts.begin, experts.end, decay.begin, decay.end);
}

}  // namespace fp8train::optim
