#!/usr/bin/env bash
# Issue-8 follow-up call: the FP8 GEMM tests, the default bench, memcheck + racecheck (scripts/gpu/h8_run.sh
# tests,bench,sanitize), then racecheck on the multicast test that reported WAR hazards in run 2. Carry
# .h8carry (scripts/gpu/h8_build.sh). Logs packed into $OUT/logs.tar.gz.
set -uo pipefail
cd "$(dirname "$0")/../.."
final=${OUT:-/tmp/h8race}
mkdir -p "$final/logs"
OUT="$final/logs/h8" bash scripts/gpu/h8_run.sh tests,bench,sanitize 2>&1 | grep -E "tests rc|PASSED|FAILED|SUMMARY|rc=|^dense +4096x7168x16384|^dense +8192|^grouped|^wgrad" | head -30
timeout 150 compute-sanitizer --tool racecheck --racecheck-report hazard --print-limit 4 .h8carry/bin/h8_tests \
  --gtest_filter='Fp8GemmDense.MulticastClustersBitExact:Fp8GemmGrouped.MulticastOfABitExact:Fp8GemmWgrad.MulticastClustersBitExact' \
  > "$final/logs/racecheck_multicast.log" 2>&1
grep -E "RACECHECK SUMMARY|PASSED|FAILED|Error:" "$final/logs/racecheck_multicast.log" | head -8
tar czf "$final/logs.tar.gz" -C "$final" logs && rm -rf "$final/logs"
