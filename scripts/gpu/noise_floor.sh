#!/usr/bin/env bash
# Issue 6 noise floor, on the device machine's CPU cores (no GPU code): the `small` preset on tinyshakespeare,
# 1000 steps, same seed and batches, as bf16 with 5 and with 4 OpenMP threads (the only difference: the order
# of floating-point reductions) and as fp32. Also re-runs the cuBLASLt GEMM GPU tests. Carry .h4carry and
# .data (tinyshakespeare.txt). metrics.jsonl of each run come back under $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
tar xJf .h4carry/libs.tar.xz -C /tmp
export LD_LIBRARY_PATH=/tmp/libs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export OMP_WAIT_POLICY=passive
B=.h4carry/bin
nproc
$B/test_cuda --gtest_filter='GemmGpu.*' 2>&1 | grep -E "^\[  (PASSED|FAILED)|Failure" | head
run() {  # name recipe moments threads
  timeout 560 $B/fp8train train --preset small --steps 1000 --seed 1 --eval-every 0 --recipe "$2" \
    --moment-dtype "$3" --threads "$4" --data .data/tinyshakespeare.txt --out /tmp/nf_$1 > /tmp/nf_$1.log 2>&1
  echo "$1 rc=$?"
  cp /tmp/nf_$1/metrics.jsonl "$OUT/$1_metrics.jsonl" 2>/dev/null
  tail -3 /tmp/nf_$1.log
}
run bf16_t5 bf16 fp32 5 &
run bf16_t4 bf16 fp32 4 &
run fp32_t5 fp32 fp32 5 &
wait
