#!/usr/bin/env bash
# The loss-parity study (docs/loss_parity.md): one model of DeepSeek-V3's shape (scripts/parity/parity.json,
# 215M parameters) trained on a corpus of Python sources under several precision recipes and seeds, every run
# of a seed from the same initial weights and batches; `fp8train compare` per seed writes compare.json and
# compare.html, and summarize.py reads them all.
#
#   bash scripts/parity/study.sh --out DIR --steps N [--seeds "1 2 3"] [--recipes bf16,fp8-deepseek]
#        [--corpus FILE] [--device cuda] [--health-every H] [-- extra fp8train options]
#   bash scripts/parity/study.sh --out DIR --budget-s S ...   # N from a 20-step fp8-deepseek probe: the steps
#                                                              # one run of the slowest recipe trains in S seconds
#
# The corpus is made by make_corpus.py (from the site-packages holding PyTorch) unless --corpus names one; its
# SHA-256 is in DIR/corpus.txt.json. Each seed's runs go to DIR/seed-S/<recipe>/; a seed whose compare.json
# exists is skipped, so a study can be spread over several calls with the same --steps. Numerics-health samples
# (per-GEMM errors against FP32) every H steps, default N/10; 0: none (each sample moves every Linear's operands
# to the host, tens of seconds at this size).
set -euo pipefail
cd "$(dirname "$0")/../.."
out="" steps="" budget="" seeds="1 2 3" recipes="bf16,fp8-deepseek" corpus="" device="cuda" health=""
extra=()
while (($#)); do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --budget-s) budget=$2; shift 2 ;;
    --seeds) seeds=$2; shift 2 ;;
    --recipes) recipes=$2; shift 2 ;;
    --corpus) corpus=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    --health-every) health=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "study.sh: unknown argument '$1' (see the top of $0)" >&2; exit 2 ;;
  esac
done
[[ -n $out ]] || { echo "study.sh: --out DIR is required" >&2; exit 2; }
[[ -n $steps || -n $budget ]] || { echo "study.sh: give --steps N or --budget-s S" >&2; exit 2; }
mkdir -p "$out"
# FP8TRAIN_BIN: an fp8train binary already built (else scripts/build.sh builds one).
bin=${FP8TRAIN_BIN:-}
if [[ -z $bin ]]; then
  bash scripts/build.sh >/dev/null
  bin=./build/fp8train
fi
if [[ -z $corpus ]]; then
  corpus=$out/corpus.txt
  [[ -f $corpus && -f $corpus.json ]] || python3 scripts/parity/make_corpus.py --out "$corpus"
fi
[[ -f $corpus ]] || { echo "study.sh: corpus '$corpus' does not exist" >&2; exit 2; }
config=scripts/parity/parity.json
common=(--config "$config" --data "$corpus" --device "$device")

if [[ -z $steps ]]; then
  probe=$out/probe
  rm -rf "$probe"
  "$bin" train "${common[@]}" --recipe fp8-deepseek --steps 20 --eval-every 0 --final-eval-windows 1 \
    --health-every 0 --out "$probe" "${extra[@]}" >"$out/probe.log" 2>&1
  read -r tps steps < <(python3 - "$probe/metrics.jsonl" "$budget" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
tps = statistics.median(r["tokens_per_s"] for r in rows[-10:])  # the steady steps, past the warm-up
tokens_per_step = 64 * 1024  # parity.json: batch_size x seq_len
print(round(tps), max(10, int(float(sys.argv[2]) * tps / tokens_per_step) // 10 * 10))
PY
)
  echo "study.sh: probe: fp8-deepseek $tps tokens/s -> --steps $steps"
fi
echo "$steps" >"$out/steps"

for seed in $seeds; do
  dir=$out/seed-$seed
  if [[ -f $dir/compare.json ]]; then echo "study.sh: seed $seed done already ($dir)"; continue; fi
  rm -rf "$dir"
  "$bin" compare --recipes "$recipes" "${common[@]}" --seed "$seed" --steps "$steps" \
    --eval-every $((steps / 10)) --health-every "${health:-$((steps / 10))}" --out "$dir" "${extra[@]}"
done
python3 scripts/parity/summarize.py "$out"
