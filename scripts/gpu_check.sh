#!/usr/bin/env bash
# The GPU check, on a machine with a Hopper GPU (sm_90) and the CUDA toolkit: builds fp8train with the normal
# CMake build into build/ (CUDA is detected), runs the whole test suite (the GPU tests included; not the Python
# oracles, label `oracle`: the GPU machine cannot reach PyPI), compute-sanitizer memcheck and racecheck on the
# FP8 GEMM tests, and the two GPU benchmarks. Every log goes to $OUT (default out-gpu/): env.txt, build.log,
# tests.log, sanitize.log, bench_{gemm,quant}.{jsonl,txt}.
# Usage: bash scripts/gpu_check.sh [STEPS]   STEPS: comma-separated build,tests,sanitize,bench (default all).
# Extra `bench gemm` options (e.g. --sweep) go in BENCH_GEMM_ARGS. Exits non-zero if any step failed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
steps=${1:-build,tests,sanitize,bench}
out=${OUT:-out-gpu}
mkdir -p "$out"
jobs=$(nproc 2>/dev/null || echo 4)
failed=()
has() { [[ ",$steps," == *",$1,"* ]]; }
# step NAME LOG SECONDS COMMAND...: runs the command under a timeout, its output in LOG.
step() {
  local name=$1 log=$2 limit=$3
  shift 3
  echo "=== $name"
  timeout "$limit" "$@" > "$log" 2>&1
  local rc=$?
  echo "$name: exit $rc ($log)"
  [ "$rc" -eq 0 ] || failed+=("$name")
}

{
  date -u
  git rev-parse HEAD 2>/dev/null
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv
  nvcc --version | tail -1
  cmake --version | head -1
} > "$out/env.txt" 2>&1
cat "$out/env.txt"

if has build; then
  step build "$out/build.log" 900 bash -c "cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DFP8TRAIN_WERROR=ON && cmake --build build -j$jobs"
  tail -3 "$out/build.log"
fi
if has tests; then
  step tests "$out/tests.log" 1500 ctest --test-dir build -LE "long|oracle" -j"$jobs" --output-on-failure
  tail -4 "$out/tests.log"
fi
if has sanitize; then
  # The FP8 GEMM kernels' edge cases: ragged tiles, split-K, 192-row tiles, clusters, bulk scale copies.
  gemm_tests='Fp8GemmDense.EdgeShapes:Fp8GemmDense.SplitK*:Fp8GemmDense.ThreeWarpgroup*:Fp8GemmDense.Multicast*'
  gemm_tests+=':Fp8GemmDense.Bulk*:Fp8GemmGrouped.Leading*:Fp8GemmGrouped.Bulk*:Fp8GemmWgrad.KGrouped*'
  step sanitize "$out/sanitize.log" 900 bash -c "
    compute-sanitizer --tool memcheck --error-exitcode 1 build/tests/test_cuda --gtest_filter='$gemm_tests' &&
    compute-sanitizer --tool racecheck --racecheck-report all --error-exitcode 1 build/tests/test_cuda \
      --gtest_filter='$gemm_tests'"
  grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitize.log"
fi
if has bench; then
  step bench_quant "$out/bench_quant.txt" 600 bash -c "./build/fp8train bench quant > '$out/bench_quant.jsonl'"
  step bench_gemm "$out/bench_gemm.txt" 900 bash -c "./build/fp8train bench gemm ${BENCH_GEMM_ARGS:-} \
    > '$out/bench_gemm.jsonl'"
  cat "$out/bench_gemm.txt"
fi

if [ ${#failed[@]} -gt 0 ]; then
  echo "gpu_check: failed: ${failed[*]} (logs in $out/)"
  exit 1
fi
echo "gpu_check: all steps passed (logs in $out/)"
