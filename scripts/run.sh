#!/usr/bin/env bash
# The main job on its embedded default: sets up, builds, and runs it. Extra arguments go to the job.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
exec ./build/fp8train numerics accum "$@"
