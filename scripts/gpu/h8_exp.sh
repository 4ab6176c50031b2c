#!/usr/bin/env bash
# Issue-8 experiment call (device machine, .h8carry carried): the FP8 GEMM tests, the bench with the experiment
# variants and the dense block/multicast sweep, and Nsight Compute's per-SASS-instruction stall samples of the
# production kernel on 4096x7168x16384. Everything lands in $OUT/logs.tar.gz (the device returns <= 8 files).
# Usage: bash scripts/gpu/h8_exp.sh [tests,bench,splits,floor,rows192,sweep,source]
set -uo pipefail
cd "$(dirname "$0")/../.."
STEPS=${1:-tests,bench,sweep,source}
has() { [[ ",$STEPS," == *",$1,"* ]]; }
final=${OUT:-/tmp/h8exp}
L="$final/logs"
mkdir -p "$L"
export PATH=/usr/local/cuda/bin:$PATH
BIN=.h8carry/bin
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit --format=csv > "$L/info.txt" 2>&1
if has tests; then
  timeout 240 $BIN/h8_tests > "$L/tests.log" 2>&1; echo "tests rc=$?"
  grep -E '^\[ *(FAILED|PASSED) ' "$L/tests.log" | head
fi
if has bench; then
  timeout 200 $BIN/h8_bench --experiments > "$L/bench.log" 2>&1; echo "bench rc=$?"
  sed -n '/^family/,$p' "$L/bench.log" | cut -c1-150
fi
if has splits; then  # split-K sweep of the M = 128 shapes (with the cuBLASLt baselines)
  timeout 240 $BIN/h8_bench --split-sweep --only dense --reps 20 > "$L/splits.log" 2>&1; echo "splits rc=$?"
  sed -n '/^family/,$p' "$L/splits.log" | cut -c1-150
fi
if has floor; then  # M = 128: ours, cuBLASLt and a read-only kernel, with the memset flush and with a clean flush
  for fl in "" --clean-flush; do
    timeout 60 $BIN/h8_bench --floor --only dense --reps 30 $fl > "$L/floor$fl.log" 2>&1; echo "floor $fl rc=$?"
    sed -n '/^family/,$p' "$L/floor$fl.log" | grep -E "heur|floor|cublaslt fp8 1x" | cut -c1-120
  done
fi
if has rows192; then  # 128- vs 192-row tiles at block_n 128 (production and the cost-split experiments)
  timeout 150 $BIN/h8_bench --rows192 ${H8_ROWS192_ARGS:---experiments --only dense} --no-baselines --reps 10 > "$L/rows192.log" 2>&1
  echo "rows192 rc=$?"
  sed -n '/^family/,$p' "$L/rows192.log" | grep -E "^dense +(4096|8192)|^wgrad" | cut -c1-120
fi
if has sweep; then
  timeout 200 $BIN/h8_bench --sweep --only dense --no-baselines --reps 10 > "$L/sweep.log" 2>&1; echo "sweep rc=$?"
  sed -n '/^family/,$p' "$L/sweep.log" | cut -c1-120
fi
if has source; then
  cfg="${H8_PROFILE_CONFIG:-4096 7168 16384 176 0}"
  timeout 200 ncu --clock-control none --launch-skip 2 --launch-count 1 -k regex:fp8_gemm_kernel \
    --section WarpStateStats --section SourceCounters --section SpeedOfLight --section MemoryWorkloadAnalysis_Tables \
    -o "$L/prof" $BIN/h8_bench --profile $cfg > "$L/ncu.log" 2>&1; echo "ncu rc=$?"
  ncu --import "$L/prof.ncu-rep" --page source --csv --print-source sass > "$L/source.csv" 2> "$L/source.err"
  echo "source rc=$? lines=$(wc -l < "$L/source.csv")"; head -c 600 "$L/source.err"
  head -3 "$L/source.csv" | cut -c1-400
  ncu --import "$L/prof.ncu-rep" --page details > "$L/details.txt" 2>&1
  grep -E "Duration|SM Frequency|Compute \(SM\) Throughput|Shared|Bank" "$L/details.txt" | head -20
fi
nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv >> "$L/info.txt" 2>&1
tar czf "$final/logs.tar.gz" -C "$final" logs && rm -rf "$L"
echo "done in ${SECONDS}s"
