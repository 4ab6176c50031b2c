// CUDA launchers of cross-entropy, AdamW and the sum of squares (ops/op_table.h); none yet: the table's entries stay null and the entry points
// say the op is not implemented on cuda.
#include "ops/cuda/kernels.h"

namespace fp8train::ops::cuda {

void install_train_ops(OpTable&) {}

}  // namespace fp8train::ops::cuda
