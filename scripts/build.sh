#!/usr/bin/env bash
# Configures and builds fp8train into build/ (Release, warnings as errors). Extra arguments go to CMake,
# e.g. -DFP8TRAIN_CUDA=OFF. BUILD_DIR overrides the folder.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
build_dir=${BUILD_DIR:-build}
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DFP8TRAIN_WERROR=ON "$@" >/dev/null
cmake --build "$build_dir" -j"$jobs"
