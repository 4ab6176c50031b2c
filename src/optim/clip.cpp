// Global-norm clipping over the gradient arena (see clip.h).
#include "optim/clip.h"

#include <cmath>
#include <vector>

#include "ops/elementwise.h"
#include "ops/sum_squares.h"

namespace fp8train::optim {

double global_grad_norm(const ExecCtx& ctx, const ParamArenas& params) {
  const ArenaLayout& layout = params.layout();
  const int64_t n = static_cast<int64_t>(layout.views().size());
  std::vector<int64_t> bounds;
  bounds.reserve(static_cast<size_t>(2 * n));
  for (const ArenaLayout::View& v : layout.views()) {
    bounds.push_back(v.offset);
    bounds.push_back(v.offset + v.numel);
  }
  const Tensor sums = ctx.scratch({n}, DType::F64);
  ops::sum_squares_segments(ctx, params.grads.flat(),
                            Tensor::from_vector(bounds, {n, 2}, MemCategory::Workspace, ctx.device), sums);
  double total = 0.0;
  for (double s : sums.to_vector<double>()) total += s;
  return std::sqrt(total);
}

double clip_grad_norm(const ExecCtx& ctx, const ParamArenas& params, double max_norm) {
  const double norm = global_grad_norm(ctx, params);
  if (max_norm > 0.0 && std::isfinite(norm) && norm > max_norm)
    scale_grads(ctx, params, static_cast<float>(max_norm / (norm + 1e-6)));
  return norm;
}

void scale_grads(const ExecCtx& ctx, const ParamArenas& params, float factor) {
  // Rows of kAlignElements, so the row-parallel elementwise kernel splits the arena across threads.
  ops::scale(ctx, params.grads.flat().view({-1, ArenaLayout::kAlignElements}), factor);
}

void zero_grads(const ParamArenas& params) { params.grads.flat().zero_(); }

}  // namespace fp8train::optim
