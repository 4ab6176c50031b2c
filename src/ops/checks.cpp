// Argument checks of the op entry points (see checks.h).
#include "ops/checks.h"

namespace fp8train::ops::check {

void matrix(std::string_view op, std::string_view arg, const Tensor& t, int64_t rows, int64_t cols) {
  FP8T_CHECK(t.defined(), "{}: {} is undefined", op, arg);
  FP8T_CHECK(t.is_matrix(), "{}: {} must be a 2-D matrix view with unit column stride, got {}", op, arg, t.str());
  FP8T_CHECK(rows < 0 || t.size(0) == rows, "{}: {} must have {} rows, got {}", op, arg, rows, t.str());
  FP8T_CHECK(cols < 0 || t.size(1) == cols, "{}: {} must have {} columns, got {}", op, arg, cols, t.str());
  FP8T_CHECK(t.size(0) <= 1 || t.ld() >= t.size(1), "{}: {} has overlapping rows ({})", op, arg, t.str());
}

void dtype(std::string_view op, std::string_view arg, const Tensor& t, DType expected) {
  FP8T_CHECK(t.defined(), "{}: {} is undefined", op, arg);
  FP8T_CHECK(t.dtype() == expected, "{}: {} must be {}, got {}", op, arg, dtype_name(expected), t.str());
}

void float_dtype(std::string_view op, std::string_view arg, const Tensor& t) {
  FP8T_CHECK(t.defined(), "{}: {} is undefined", op, arg);
  FP8T_CHECK(is_floating(t.dtype()), "{}: {} must be f32 or f64, got {}", op, arg, t.str());
}

void storage_dtype(std::string_view op, std::string_view arg, const Tensor& t) {
  FP8T_CHECK(t.defined(), "{}: {} is undefined", op, arg);
  FP8T_CHECK(is_float_storage(t.dtype()), "{}: {} must be f32, bf16 or f64, got {}", op, arg, t.str());
}

void compute_dtype_of(std::string_view op, std::string_view arg, const Tensor& t, DType storage) {
  if (!t.defined()) return;
  FP8T_CHECK(t.dtype() == compute_dtype(storage), "{}: {} must be {} beside {} activations, got {}", op, arg,
             dtype_name(compute_dtype(storage)), dtype_name(storage), t.str());
}

void vector(std::string_view op, std::string_view arg, const Tensor& t, int64_t n) {
  FP8T_CHECK(t.defined(), "{}: {} is undefined", op, arg);
  FP8T_CHECK(t.is_contiguous(), "{}: {} must be contiguous, got {}", op, arg, t.str());
  FP8T_CHECK(n < 0 || t.numel() == n, "{}: {} must have {} elements, got {}", op, arg, n, t.str());
}

void on_device(std::string_view op, const ExecCtx& ctx, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    if (!t->defined()) continue;
    FP8T_CHECK(t->device() == ctx.device, "{}: a tensor is on {} but the op runs on {} ({})", op, t->device().str(),
               ctx.device.str(), t->str());
  }
}

void same_dtype(std::string_view op, std::initializer_list<const Tensor*> tensors) {
  const Tensor* first = nullptr;
  for (const Tensor* t : tensors) {
    if (!t->defined()) continue;
    if (!first) {
      first = t;
      continue;
    }
    FP8T_CHECK(t->dtype() == first->dtype(), "{}: tensors of different dtypes ({} and {})", op, first->str(),
               t->str());
  }
}

Tensor as_matrix(std::string_view op, std::string_view arg, const Tensor& t) {
  FP8T_CHECK(t.defined(), "{}: {} is undefined", op, arg);
  if (t.dim() == 2 && t.is_matrix()) return t;
  FP8T_CHECK(t.is_contiguous(), "{}: {} must be contiguous or a matrix view, got {}", op, arg, t.str());
  if (t.dim() == 0) return t.view({1, 1});
  return t.view({-1, t.size(-1)});
}

}  // namespace fp8train::ops::check
