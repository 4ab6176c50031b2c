#!/usr/bin/env bash
# The loss-parity study (docs/loss_parity.md): one model of DeepSeek-V3's shape (scripts/parity/parity.json,
# 215M parameters) trained on a corpus of Python sources under several precision recipes and seeds, every run
# of a seed from the same initial weights and batches; `fp8train compare` per seed writes compare.json and
# compare.html, and summarize.py reads them all.
#
#   bash scripts/parity/study.sh --out DIR --steps N [--seeds "1 2 3"] [--recipes bf16,fp8-deepseek]
#        [--corpus FILE] [--device cuda] [--health-every H] [--gpus G|ID,ID,...] [-- extra fp8train options]
#   bash scripts/parity/study.sh --out DIR --budget-s S ...   # N from a 20-step fp8-deepseek probe: the steps
#                                                              # one run of the slowest recipe trains in S seconds
#
# The corpus is made by make_corpus.py (from the site-packages holding PyTorch) unless --corpus names one; its
# SHA-256 is in DIR/corpus.txt.json. Each seed's runs go to DIR/seed-S/<recipe>/; a seed whose compare.json
# covers the recipes asked for is skipped, and a finished run of a recipe is reused. An unfinished one is finished
# from its last checkpoint when it saved any (pass `-- --save-every N`), else removed and run again. So a study can
# be spread over several calls with the same --steps, and a run longer than one call can span two.
# --gpus G (G > 1) trains a seed's recipes side by side, one process per recipe, each GPU taking the next recipe in
# --recipes order as it comes free, then compares them: a slow ablation (promote=never, ~10x slower) listed first
# keeps one GPU while the others train the rest. --gpus 2,3 names the devices instead (0..G-1 for a count), so that
# two studies (say, two seeds) can share one machine. The baseline is bf16 where it is listed, else the first
# recipe. Numerics-health samples (per-GEMM errors against FP32) every H steps, default N/10; 0: none.
set -euo pipefail
cd "$(dirname "$0")/../.."
out="" steps="" budget="" seeds="1 2 3" recipes="bf16,fp8-deepseek" corpus="" device="cuda" health="" gpus=1
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
    --gpus) gpus=$2; shift 2 ;;
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

# --gpus G: devices 0..G-1; --gpus 2,3: those devices (several studies side by side on one machine)
if [[ $gpus =~ ^[1-9][0-9]*$ ]]; then
  gpu_ids=($(seq 0 $((gpus - 1))))
elif [[ $gpus =~ ^[0-9]+(,[0-9]+)+$ ]]; then
  IFS=, read -ra gpu_ids <<<"$gpus"
else
  echo "study.sh: --gpus takes a count (2) or a list of device ids (2,3), not '$gpus'" >&2
  exit 2
fi
IFS=, read -ra recipe_list <<<"$recipes"
# Whether DIR's compare.json compares exactly the recipes asked for (a one-recipe compare of --gpus does not count).
compared() {
  python3 - "$1/compare.json" "$recipes" <<'PY'
import json, sys
try:
    done = sorted(r["recipe"] for r in json.load(open(sys.argv[1]))["recipes"])
except (OSError, ValueError, KeyError, TypeError):
    sys.exit(1)
sys.exit(0 if done == sorted(sys.argv[2].split(",")) else 1)
PY
}
# finish RECIPE DIR LOG: resume RECIPE's cut run in DIR from its last checkpoint (`fp8train train --resume`), if it
# has one; compare's folder for a recipe is its spec with ':' -> '_' and '=' -> '-'.
finish() {
  local run=${1//:/_}
  run=$2/${run//=/-}
  [[ -d $run && ! -f $run/summary.json && -f $run/checkpoints/latest ]] || return 0
  echo "study.sh: $1 (seed $seed): resuming its cut run from $(cat "$run/checkpoints/latest")"
  "$bin" train --resume "$run" >"$3" 2>&1
}
for seed in $seeds; do
  dir=$out/seed-$seed
  if compared "$dir"; then echo "study.sh: seed $seed done already ($dir)"; continue; fi
  mkdir -p "$dir"
  # A run without its summary was cut short (compare refuses to reuse it): finished from its last checkpoint where it
  # saved one (finish, below), else trained again from the start.
  for run in "$dir"/*/; do
    [[ -d $run && ! -f $run/summary.json && ! -f $run/checkpoints/latest ]] && rm -rf "$run"
  done
  seed_args=("${common[@]}" --seed "$seed" --steps "$steps" --eval-every $((steps / 10))
    --health-every "${health:-$((steps / 10))}" --out "$dir" "${extra[@]}")
  if ((${#gpu_ids[@]} > 1)); then
    # one worker per GPU; each takes the next recipe nobody has claimed (mkdir is atomic), so a slow recipe keeps
    # one GPU while the others work through the rest
    claims=$dir/.claims
    rm -rf "$claims"
    mkdir -p "$claims"
    pids=()
    for g in "${gpu_ids[@]}"; do
      (
        for ((i = 0; i < ${#recipe_list[@]}; i++)); do
          mkdir "$claims/$i" 2>/dev/null || continue
          {
            CUDA_VISIBLE_DEVICES=$g finish "${recipe_list[i]}" "$dir" "$dir/resume$i-gpu$g.log" &&
              CUDA_VISIBLE_DEVICES=$g "$bin" compare --recipes "${recipe_list[i]}" "${seed_args[@]}" \
                >"$dir/recipe$i-gpu$g.log" 2>&1
          } || echo "study.sh: ${recipe_list[i]} (seed $seed, GPU $g) failed: $dir/resume$i-gpu$g.log or" \
            "$dir/recipe$i-gpu$g.log" >&2
        done
      ) &
      pids+=($!)
    done
    wait "${pids[@]}"
    rm -rf "$claims"
  else
    for ((i = 0; i < ${#recipe_list[@]}; i++)); do
      finish "${recipe_list[i]}" "$dir" "$dir/resume$i.log" ||
        echo "study.sh: resuming ${recipe_list[i]} (seed $seed) failed: $dir/resume$i.log" >&2
    done
  fi
  # compares every recipe, reusing the runs that finished above; against bf16 where it is one of them
  baseline=()
  [[ ,$recipes, == *,bf16,* ]] && baseline=(--baseline bf16)
  "$bin" compare --recipes "$recipes" "${baseline[@]}" "${seed_args[@]}"
done
python3 scripts/parity/summarize.py "$out"
