// Global-norm clipping (see clip.h). The sum of squares of each parameter is accumulated in chunks of
// kChunk elements, each chunk in FP64 sequentially, and the chunk sums are added in index order: the same
// bits whatever OpenMP's thread count.
#include "optim/clip.h"

#include <cmath>
#include <vector>

namespace fp8train::optim {
namespace {
constexpr long kChunk = 16384;

double sum_of_squares(const float* g, long n) {
  const long chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<size_t>(chunks), 0.0);
#pragma omp parallel for schedule(static) if (chunks > 4)
  for (long c = 0; c < chunks; ++c) {
    const long begin = c * kChunk, end = std::min(n, begin + kChunk);
    double s = 0.0;
    for (long i = begin; i < end; ++i) s += static_cast<double>(g[i]) * static_cast<double>(g[i]);
    partial[static_cast<size_t>(c)] = s;
  }
  double total = 0.0;
  for (double s : partial) total += s;
  return total;
}
}  // namespace

double global_grad_norm(const ParamList& params) {
  double total = 0.0;
  for (const ParamBuffer& p : params) total += sum_of_squares(p.grad, static_cast<long>(p.size));
  return std::sqrt(total);
}

double clip_grad_norm(const ParamList& params, double max_norm) {
  const double norm = global_grad_norm(params);
  if (max_norm > 0.0 && std::isfinite(norm) && norm > max_norm)
    scale_grads(params, static_cast<float>(max_norm / (norm + 1e-6)));
  return norm;
}

void scale_grads(const ParamList& params, float factor) {
  for (const ParamBuffer& p : params) {
    const long n = static_cast<long>(p.size);
#pragma omp parallel for schedule(static) if (n > 65536)
    for (long i = 0; i < n; ++i) p.grad[i] *= factor;
  }
}

void zero_grads(const ParamList& params) {
  for (const ParamBuffer& p : params)
    for (size_t i = 0; i < p.size; ++i) p.grad[i] = 0.0f;
}

}  // namespace fp8train::optim
