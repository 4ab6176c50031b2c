#!/usr/bin/env bash
# Issue 6 on the device machine's 16 CPU cores (no GPU code): `fp8train train --preset small --steps 1000
# --recipe fp8-deepseek` on tinyshakespeare, same seed and batches as scripts/gpu/noise_floor.sh's bf16 run.
# Usage: bash scripts/gpu/fp8_recipe_cpu.sh start|resume   (each call stops after ~9 minutes; checkpoints
# every 25 steps in /tmp/nf_fp8, which survives between calls while the machine stays warm).
set -uo pipefail
cd "$(dirname "$0")/../.."
tar xJf .h4carry/libs.tar.xz -C /tmp
export LD_LIBRARY_PATH=/tmp/libs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export OMP_WAIT_POLICY=passive
args=(--preset small --steps 1000 --seed 1 --eval-every 0 --save-every 25 --recipe fp8-deepseek --moment-dtype bf16
      --threads 16 --data .data/tinyshakespeare.txt --out /tmp/nf_fp8)
[ "${1:-start}" = resume ] && args+=(--resume /tmp/nf_fp8)
timeout 540 .h4carry/bin/fp8train train "${args[@]}" > /tmp/nf_fp8_$1.log 2>&1
echo "rc=$?"
tail -4 /tmp/nf_fp8_$1.log
cp /tmp/nf_fp8/metrics.jsonl "$OUT/fp8_metrics.jsonl" 2>/dev/null
cp /tmp/nf_fp8_$1.log "$OUT/" 2>/dev/null
tail -1 /tmp/nf_fp8/metrics.jsonl | cut -c1-200
