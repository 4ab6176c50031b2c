#!/usr/bin/env bash
# Issue-7 follow-up call: GPU tests, bench quant and bench gemm (h4_run.sh all: 20 repeats, memcheck, SASS);
# logs packed into $OUT/logs.tar.gz.
set -uo pipefail
cd "$(dirname "$0")/../.."
final=${OUT:-/tmp/diagout}
OUT="$final/logs/h4" bash scripts/gpu/h4_run.sh all > "$final/h4_stdout.txt" 2>&1
mv "$final/h4_stdout.txt" "$final/logs/h4/"
grep -E "^\[  (FAILED|PASSED) |Failure" -A3 "$final/logs/h4/gpu_tests.log" | head -30
grep -E "e5m6|dequant|copy" "$final/logs/h4/bench_quant.txt"
grep -E "ERROR SUMMARY" "$final/logs/h4/memcheck.log"
tar czf "$final/logs.tar.gz" -C "$final" logs && rm -rf "$final/logs"
