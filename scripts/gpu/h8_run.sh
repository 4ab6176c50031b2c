#!/usr/bin/env bash
# One device-machine call for the FP8 GEMM kernels (issue 8), run by the `run` tool from the repository root
# with .h8carry carried (built here first by scripts/gpu/h8_build.sh). Writes logs under $OUT:
#   info.txt      GPU, driver, clocks before and after
#   sass.txt      per-kernel QGMMA / local-memory (LDL/STL) counts from cuobjdump
#   tests.log     the bit-exactness GoogleTests (tests/cuda/fp8_gemm_*_test.cpp)
#   bench.log     h8_bench timings (JSON lines + table)
#   sanitize.log  compute-sanitizer memcheck and racecheck on a small test subset
#   profile.txt   Nsight Compute sections for a few dense configurations (clocks left alone)
# Usage: bash scripts/gpu/h8_run.sh [steps]   steps: any of probe,sass,tests,bench,sweep,experiments,profile,
# sanitize (default probe,sass,tests,bench,sanitize); every step has its own timeout so one hang cannot eat
# the call.
set -uo pipefail
STEPS=${1:-probe,sass,tests,bench,sanitize}
OUT=${OUT:-/tmp/h8out}
mkdir -p "$OUT"
BIN=.h8carry/bin
has() { [[ ",$STEPS," == *",$1,"* ]]; }

# cuBLASLt: the toolkit's, else the one PyTorch's wheels carry.
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
         $(python3 -c 'import nvidia.cublas, os; print(os.path.dirname(nvidia.cublas.__file__) + "/lib")' 2>/dev/null); do
  if ls "$d"/libcublasLt.so.13* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; break; fi
done
export PATH=/usr/local/cuda/bin:$PATH

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu --format=csv
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  ldd $BIN/h8_bench | grep -i cublas
} > "$OUT/info.txt" 2>&1
cat "$OUT/info.txt"

if has sass; then
  {
    for k in $(cuobjdump -sass $BIN/h8_bench | grep -o 'Function : [^ ]*' | awk '{print $3}' | sort -u); do
      body=$(cuobjdump -sass -fun "$k" $BIN/h8_bench 2>/dev/null)
      printf '%s QGMMA=%s LDL=%s STL=%s HGMMA=%s\n' "$(echo "$k" | c++filt | cut -c1-150)" \
        "$(grep -c QGMMA <<<"$body")" "$(grep -c 'LDL' <<<"$body")" "$(grep -c 'STL' <<<"$body")" "$(grep -c HGMMA <<<"$body")"
    done
    cuobjdump -sass $BIN/h8_bench | grep -m1 -B2 -A40 'QGMMA' | head -80
  } > "$OUT/sass.txt" 2>&1
  head -40 "$OUT/sass.txt"
fi

if has probe; then
  echo "=== probe"
  timeout 60 $BIN/h8_tests --gtest_filter='Fp8GemmDense.EdgeShapes' 2>&1 | tail -15
  rc=${PIPESTATUS[0]}
  echo "probe rc=$rc"
  if [[ $rc == 124 ]]; then echo "PROBE HUNG: skipping the rest"; exit 1; fi
fi

if has tests; then
  echo "=== tests"
  timeout 240 $BIN/h8_tests 2>&1 | tee "$OUT/tests.log" | grep -E '^\[ *(OK|FAILED|PASSED|  FAILED) |Failure|differ|rc=' | head -60
  echo "tests rc=${PIPESTATUS[0]}"
fi

if has bench || has sweep; then
  echo "=== bench"
  args=""
  has sweep && args="--sweep"
  has experiments && args="$args --experiments"
  timeout 300 $BIN/h8_bench $args 2>&1 > "$OUT/bench.log"
  echo "bench rc=$?"
  sed -n '/^family/,$p' "$OUT/bench.log"
  grep -v '^JSON' "$OUT/bench.log" | grep -iE 'fail|error' | head
fi

if has profile; then
  echo "=== profile (elapsed ${SECONDS}s)"
  {
    cfg="${H8_PROFILE_CONFIG:-4096 7168 16384 176 2}"  # M N K block_n multicast (0 none, 1 A, 2 B)
    echo "##### $cfg"
    timeout 90 ncu --clock-control none --launch-skip 2 --launch-count 1 -k regex:fp8_gemm_kernel \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
      --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy \
      $BIN/h8_bench --profile $cfg 2>&1 | grep -vE '^==PROF==|^ *$' | head -150
  } > "$OUT/profile.txt" 2>&1
  grep -E '#####|Duration|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|DRAM Throughput|L1/TEX Cache Throughput|Issue Slots Busy|No Eligible' "$OUT/profile.txt" | head -60
fi

if has sanitize; then
  echo "=== sanitize (elapsed ${SECONDS}s)"
  filter='Fp8GemmDense.EdgeShapes:Fp8GemmDense.SplitK*:Fp8GemmDense.ThreeWarpgroup*:Fp8GemmDense.PersistentSchedule*:Fp8GemmDense.Multicast*:Fp8GemmDense.Bulk*:Fp8GemmGrouped.Leading*:Fp8GemmGrouped.Multicast*:Fp8GemmGrouped.Bulk*:Fp8GemmWgrad.KGrouped*'
  {
    timeout 150 compute-sanitizer --tool memcheck --print-limit 20 $BIN/h8_tests --gtest_filter="$filter" 2>&1 | tail -25
    echo "memcheck rc=${PIPESTATUS[0]}"
    timeout 150 compute-sanitizer --tool racecheck --racecheck-report all --print-limit 20 $BIN/h8_tests \
      --gtest_filter='Fp8GemmDense.EdgeShapes:Fp8GemmDense.SplitK*:Fp8GemmDense.ThreeWarpgroup*:Fp8GemmDense.Multicast*:Fp8GemmDense.Bulk*:Fp8GemmGrouped.Bulk*:Fp8GemmWgrad.KGrouped*' 2>&1 | tail -25
    echo "racecheck rc=${PIPESTATUS[0]}"
  } > "$OUT/sanitize.log" 2>&1
  cat "$OUT/sanitize.log" | grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|rc=|Hazard|Invalid' | head -20
fi
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv >> "$OUT/info.txt" 2>&1
echo "done in ${SECONDS}s"
