#!/usr/bin/env bash
# The main job on its embedded default: sets up, builds, and trains a small DeepSeek-V3-style model (MLA +
# DeepSeekMoE + MTP) with DeepSeek's FP8 recipe (fp8-deepseek) on the embedded procedural corpus for a few minutes
# (`fp8train train --config scripts/run.json`: preset `small`, 120 steps, 512 final evaluation windows; the FP8
# emulation on the CPU costs ~3.7x a bf16 step, so fewer steps than the preset's 400). The device is `auto`: on a
# Hopper GPU the run trains there (120 steps in ~5 s on an H100), else on the CPU; the output names the recipe and
# device that ran. Extra arguments go to `fp8train train` and override the file (e.g. --recipe bf16
# --steps 400 --data FILE --out DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
# Passive OpenMP waiting: on a shared machine libgomp's default spin-waiting makes each parallel region wait for
# a descheduled partner thread (measured 1.5x slower training steps at load 4, bench/RESULTS.md).
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
exec ./build/fp8train train --config scripts/run.json "$@"
