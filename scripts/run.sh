#!/usr/bin/env bash
# The main job on its embedded default: sets up, builds, and trains a small DeepSeek-V3-style model (MLA +
# DeepSeekMoE + MTP) on the embedded procedural corpus for a few minutes (`fp8train train`, preset `small`).
# Extra arguments go to `fp8train train` (e.g. --preset tiny --data FILE --steps N --out DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
# Passive OpenMP waiting: on a shared machine libgomp's default spin-waiting makes each parallel region wait for
# a descheduled partner thread (measured 1.5x slower training steps at load 4, bench/RESULTS.md).
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
exec ./build/fp8train train "$@"
