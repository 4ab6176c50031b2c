#!/usr/bin/env bash
# One device-machine call that runs the issue-7 suite (scripts/gpu/h4_run.sh) and/or the issue-8 suite
# (scripts/gpu/h8_run.sh) and packs every log into one archive, $OUT/logs.tar.gz (the device tool returns at
# most 8 files). Carry .h4carry and .h8carry/bin or .h8carry/bin.tar.xz (scripts/gpu/h4_pack.sh,
# scripts/gpu/h8_build.sh; `tar cJf .h8carry/bin.tar.xz -C .h8carry/bin h8_tests h8_bench`).
# Usage: bash scripts/gpu/call.sh H4_STEPS H8_STEPS   (either may be "none"), e.g. "all" "probe,tests,sweep"
set -uo pipefail
cd "$(dirname "$0")/../.."
h4=${1:-all}
h8=${2:-none}
final=${OUT:-/tmp/callout}
mkdir -p "$final/logs"
start=$SECONDS
# .h8carry/bin.tar.xz (h8_tests and h8_bench, xz: the carry limit is 64 MiB) unpacks into .h8carry/bin
if [ -f .h8carry/bin.tar.xz ]; then mkdir -p .h8carry/bin && tar xJf .h8carry/bin.tar.xz -C .h8carry/bin; fi
if [ "$h4" != none ]; then
  OUT="$final/logs/h4" bash scripts/gpu/h4_run.sh "$h4"
  echo "h4 suite done at ${SECONDS}s"
fi
if [ "$h8" != none ]; then
  OUT="$final/logs/h8" bash scripts/gpu/h8_run.sh "$h8"
  echo "h8 suite done at $((SECONDS - start))s"
fi
tar czf "$final/logs.tar.gz" -C "$final" logs && rm -rf "$final/logs"
