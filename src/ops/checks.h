// Argument checks shared by the validating entry points (tier 3) of the ops: each throws fp8train::Error
// with a sentence that names the op, the argument and what was expected.
#pragma once
#include <initializer_list>
#include <string_view>

#include "common/error.h"
#include "tensor/exec_ctx.h"
#include "tensor/tensor.h"

namespace fp8train::ops::check {

// t is defined, 2-D with unit column stride (a matrix view), of `rows`×`cols` (−1: any).
void matrix(std::string_view op, std::string_view arg, const Tensor& t, int64_t rows = -1, int64_t cols = -1);
void dtype(std::string_view op, std::string_view arg, const Tensor& t, DType expected);
void float_dtype(std::string_view op, std::string_view arg, const Tensor& t);  // F32 or F64
// A floating storage dtype: F32, F64 or BF16.
void storage_dtype(std::string_view op, std::string_view arg, const Tensor& t);
// t (if defined) holds the compute dtype of the storage dtype `storage` (F32 for F32/BF16, F64 for F64): what
// statistics, norm gains, router state and losses use beside activations of that storage dtype.
void compute_dtype_of(std::string_view op, std::string_view arg, const Tensor& t, DType storage);
// A contiguous 1-D tensor of n elements (−1: any).
void vector(std::string_view op, std::string_view arg, const Tensor& t, int64_t n = -1);
// Every defined tensor lives on ctx's device.
void on_device(std::string_view op, const ExecCtx& ctx, std::initializer_list<const Tensor*> tensors);
void same_dtype(std::string_view op, std::initializer_list<const Tensor*> tensors);
// Leading dims collapsed into rows: contiguous tensors of any rank, or matrix views, become a matrix view.
Tensor as_matrix(std::string_view op, std::string_view arg, const Tensor& t);

}  // namespace fp8train::ops::check
