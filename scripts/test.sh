#!/usr/bin/env bash
# Sets up (Debian packages, the Python oracles), builds and runs the test suite (ctest). GPU tests report SKIPPED
# without a GPU.
# --asan: Debug build with AddressSanitizer + UndefinedBehaviorSanitizer in build-asan/ instead.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
# The Python oracles of the `oracle` tests (transformers, torch, safetensors, ml_dtypes; pinned).
bash scripts/setup_python.sh
if [ "${1:-}" = "--asan" ]; then
  shift
  BUILD_DIR=build-asan bash scripts/build.sh -DCMAKE_BUILD_TYPE=Debug -DFP8TRAIN_SANITIZE=ON -DFP8TRAIN_CUDA=OFF "$@"
  export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  ctest --test-dir build-asan --output-on-failure -j"$jobs" -LE long
else
  bash scripts/build.sh "$@"
  ctest --test-dir build --output-on-failure -j"$jobs" -LE long
fi
