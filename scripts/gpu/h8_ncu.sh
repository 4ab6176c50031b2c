#!/usr/bin/env bash
# Nsight Compute on the device machine for one dense shape: our kernel (heuristic-like config given as
# "M N K BLOCK_N MC", H8_SPLITS for split-K) and cuBLASLt's FP8 block-scaled GEMM on the same shape; speed of
# light, warp states, memory tables, and our kernel's per-SASS-instruction stall samples (source.csv).
# Usage: bash scripts/gpu/h8_ncu.sh "128 2112 7168 32 0" [splits]     (.h8carry/bin carried or unpacked)
set -uo pipefail
cd "$(dirname "$0")/../.."
cfg=${1:-"128 2112 7168 32 0"}
export H8_SPLITS=${2:-1}
final=${OUT:-/tmp/h8ncu}
L="$final/ncu"
mkdir -p "$L"
export PATH=/usr/local/cuda/bin:$PATH
BIN=.h8carry/bin
sections="--section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section SchedulerStats --section LaunchStats --section Occupancy --section SourceCounters"
timeout 150 ncu --clock-control none --launch-skip 2 --launch-count 1 -k regex:fp8_gemm_kernel $sections \
  -o "$L/ours" $BIN/h8_bench --profile $cfg > "$L/ours.log" 2>&1; echo "ncu ours rc=$?"
ncu --import "$L/ours.ncu-rep" --page details > "$L/ours_details.txt" 2>&1
ncu --import "$L/ours.ncu-rep" --page source --csv --print-source sass > "$L/ours_source.csv" 2>/dev/null
read -r m n k _ _ <<<"$cfg"
timeout 150 ncu --clock-control none --launch-skip 2 --launch-count 1 -k regex:'^(nvjet|sm90|cutlass)' $sections \
  -o "$L/lt" $BIN/h8_bench --lt $m $n $k > "$L/lt.log" 2>&1; echo "ncu cublaslt rc=$?"
ncu --import "$L/lt.ncu-rep" --page details > "$L/lt_details.txt" 2>&1
for f in ours lt; do
  echo "=== $f"
  grep -E "^  [a-z_0-9]+.*\(|Duration|SM Frequency|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|DRAM Throughput|L1/TEX Cache Throughput|Issue Slots Busy|No Eligible|Active Warps Per|Eligible Warps|Warp Cycles Per Issued|Registers Per|Dynamic Shared|Grid Size|Block Size|Max Bandwidth|Mem Busy|Mem Pipes" "$L/${f}_details.txt" | head -40
done
rm -f "$L"/*.ncu-rep
tar czf "$final/ncu.tar.gz" -C "$final" ncu && rm -rf "$L"
