#!/usr/bin/env bash
# Nsight Compute warp-stall breakdown of the dense FP8 GEMM on 4096x7168x16384 (block 128x176, no multicast):
# the stall reasons summed over the kernel and the source lines with the most stall samples. Carry .h8carry.
set -uo pipefail
cd "$(dirname "$0")/../.."
export PATH=/usr/local/cuda/bin:$PATH
mkdir -p "$OUT"
timeout 240 ncu --clock-control none --launch-skip 2 --launch-count 1 -k regex:fp8_gemm_kernel \
  --section WarpStateStats --section SourceCounters --metrics smsp__pcsamp_warps_issue_stalled_barrier,smsp__pcsamp_warps_issue_stalled_long_scoreboard,smsp__pcsamp_warps_issue_stalled_wait,smsp__pcsamp_warps_issue_stalled_math_pipe_throttle,smsp__pcsamp_warps_issue_stalled_membar,smsp__pcsamp_warps_issue_stalled_short_scoreboard,smsp__pcsamp_warps_issue_stalled_selected,smsp__pcsamp_warps_issue_stalled_dispatch_stall,smsp__pcsamp_warps_issue_stalled_sleeping,smsp__pcsamp_warps_issue_stalled_branch_resolving,smsp__pcsamp_warps_issue_stalled_no_instructions,smsp__pcsamp_warps_issue_stalled_mio_throttle,smsp__pcsamp_warps_issue_stalled_lg_throttle,smsp__pcsamp_warps_issue_stalled_not_selected \
  .h8carry/bin/h8_bench --profile 4096 7168 16384 176 0 > "$OUT/stalls.txt" 2>&1
grep -vE "^==PROF==|^ *$" "$OUT/stalls.txt" | grep -iE "stall|pcsamp|Warp Cycles|Location|Source|sampl" | head -60
