// Tensor-core (mma.sync BF16) attention kernels; not yet: every form goes to the SIMT kernels.
#include "ops/cuda/attention_launch.h"

namespace fp8train::ops::cuda::detail {

bool attention_mma_supported(const AttnArgs&, bool) { return false; }
cudaError_t launch_attention_forward_mma(const AttnArgs&, cudaStream_t) { return cudaErrorNotSupported; }

}  // namespace fp8train::ops::cuda::detail
