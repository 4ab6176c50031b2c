// Backend test table rows (backend_ops_table.h) of the attention core.
#pragma once
#include <vector>

#include "backend_ops_table.h"

namespace fp8train::backend_test {

inline void attention_op_cases(std::vector<BackendOpCase>& out) { (void)out; }

}  // namespace fp8train::backend_test
