#!/usr/bin/env bash
# Quick issue-7 check: the quantizer GPU tests (encoders on all 2^32 inputs included) and the E5M6/dequant rows
# of bench quant. Carry .h4carry.
set -uo pipefail
cd "$(dirname "$0")/../.."
tar xJf .h4carry/libs.tar.xz -C /tmp
export LD_LIBRARY_PATH=/tmp/libs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
.h4carry/bin/test_cuda --gtest_filter='QuantizeGpu.*:Encoder*' 2>&1 | grep -E "^\[  (PASSED|FAILED)|Failure" | head
for i in 1 2; do .h4carry/bin/fp8train bench quant --mib 256 --repeats 20 --filter e5m6 2>&1 >/dev/null | grep -E "e5m6|copy"; done
