#!/usr/bin/env bash
# Instruction histogram of every kernel whose mangled name contains PATTERN in BINARY (run on the device
# machine, which has cuobjdump): bash scripts/gpu/sass_hist.sh BINARY PATTERN
set -uo pipefail
bin=$1
pat=$2
export PATH=/usr/local/cuda/bin:$PATH
for fn in $(cuobjdump -sass "$bin" | grep -oE "Function : \S+" | awk '{print $3}' | grep -E "$pat"); do
  body=$(cuobjdump -sass -fun "$fn" "$bin")
  echo "=== $(echo "$fn" | c++filt | cut -c1-200)"
  echo "instructions: $(grep -cE '^\s+/\*[0-9a-f]{4}\*/' <<<"$body")"
  grep -oE '^\s+/\*[0-9a-f]{4}\*/\s+[A-Z0-9_.]+' <<<"$body" | awk '{print $2}' | sed 's/\..*//' | sort | uniq -c |
    sort -rn | head -30 | tr '\n' ' '
  echo
done
