#!/usr/bin/env bash
# Issue-8 quick check: the FP8 GEMM tests and the default bench (scripts/gpu/h8_run.sh tests,bench). Carry .h8carry.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/h8q} bash scripts/gpu/h8_run.sh tests,bench 2>&1 | grep -E "tests rc|PASSED|FAILED|Failure|heur|cublaslt fp8 1x128|^wgrad|^grouped" | cut -c1-110 | head -40
