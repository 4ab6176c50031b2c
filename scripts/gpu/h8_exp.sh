#!/usr/bin/env bash
# Issue-8 experiment call (device machine, .h8carry carried): the FP8 GEMM tests, the bench with the experiment
# variants and the dense block/multicast sweep, and Nsight Compute's per-SASS-instruction stall samples of the
# production kernel on 4096x7168x16384. Everything lands in $OUT/logs.tar.gz (the device returns <= 8 files).
# Usage: bash scripts/gpu/h8_exp.sh [tests,bench,sassdump,early,dense,others,yield,ab,splits,floor,rows192,sweep,source]
set -uo pipefail
cd "$(dirname "$0")/../.."
STEPS=${1:-tests,bench,sweep,source}
has() { [[ ",$STEPS," == *",$1,"* ]]; }
final=${OUT:-/tmp/h8exp}
L="$final/logs"
mkdir -p "$L"
export PATH=/usr/local/cuda/bin:$PATH
BIN=.h8carry/bin
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit --format=csv > "$L/info.txt" 2>&1
# SM clock and board power every 100 ms for the whole call (is a run at the power cap?)
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 100 > "$L/smi.csv" 2>&1 &
SMI=$!
if has tests; then
  timeout 240 $BIN/h8_tests > "$L/tests.log" 2>&1; echo "tests rc=$?"
  grep -E '^\[ *(FAILED|PASSED) ' "$L/tests.log" | head
fi
if has bench; then
  timeout 200 $BIN/h8_bench --experiments > "$L/bench.log" 2>&1; echo "bench rc=$?"
  sed -n '/^family/,$p' "$L/bench.log" | cut -c1-150
fi
if has sassdump; then  # SASS of the production dense kernels (192x128 three warpgroups, 128x128, 128x192)
  cuobjdump -sass $BIN/h8_bench > "$L/sass_all.txt" 2>&1
  python3 scripts/gpu/ffma_yield.py verify "$L/sass_all.txt"; echo "ffma verify rc=$?"
  for k in ILi128ELNS2_6ScaleBE0ELNS2_8ScheduleE0ELNS2_6OutputE0ELNS2_9MulticastE0ELi128ELi3E \
           ILi128ELNS2_6ScaleBE0ELNS2_8ScheduleE0ELNS2_6OutputE0ELNS2_9MulticastE0ELi128ELi2E \
           ILi192ELNS2_6ScaleBE2ELNS2_8ScheduleE0ELNS2_6OutputE0ELNS2_9MulticastE0ELi128ELi2E; do
    awk -v k="$k" '/Function :/ {p = index($0, k) > 0} p' "$L/sass_all.txt" > "$L/sass_bn$(echo $k | cut -c4-6)_wg$(echo $k | grep -o '[23]E$' | cut -c1).txt"
  done
  ls -la "$L"/sass_*; gzip "$L/sass_all.txt"
fi
if has early; then  # scale products read before the WGMMAs, stage released before the FMAs (kFlagEarlyScales)
  timeout 240 $BIN/h8_bench --only dense --quick --reps 20 --exp ${H8_EXPS:-early} > "$L/early.log" 2>&1; echo "early rc=$?"
  sed -n '/^family/,$p' "$L/early.log" | grep -v "ops wrapper\|bf16" | cut -c1-150
fi
if has dense; then  # every dense shape: the heuristic's configuration beside cuBLASLt
  timeout 200 $BIN/h8_bench --only dense --reps 20 > "$L/dense.log" 2>&1; echo "dense rc=$?"
  sed -n '/^family/,$p' "$L/dense.log" | grep -E "heur|cublaslt fp8 1x" | cut -c1-150
fi
if has others; then  # the grouped and Wgrad families, production configurations and cuBLASLt
  for f in grouped wgrad; do
    timeout 120 $BIN/h8_bench --only $f --reps 20 > "$L/$f.log" 2>&1; echo "$f rc=$?"
    sed -n '/^family/,$p' "$L/$f.log" | cut -c1-150
  done
fi
if has yield; then  # FFMA yield-bit variants of the same binary (scripts/gpu/ffma_yield.py), run alternately
  for v in all1 all0; do python3 scripts/gpu/ffma_yield.py $v $BIN/h8_bench /tmp/h8_bench_$v && chmod +x /tmp/h8_bench_$v; done
  for pass in 1 2; do
    for v in base all1 all0; do
      b=$BIN/h8_bench; [ $v != base ] && b=/tmp/h8_bench_$v
      timeout 120 $b --only dense --quick --no-baselines --reps 20 > "$L/yield_${v}_$pass.log" 2>&1; echo "yield $v pass $pass rc=$?"
      sed -n '/^family/,$p' "$L/yield_${v}_$pass.log" | grep heur | cut -c1-110
    done
  done
fi
if has ab; then  # several builds of h8_bench alternately: h8_bench and H8_VARS (binaries in $BIN, or in
  # .h8carry/var.tar.xz, carried beside .h8carry/bin), dense shapes + cuBLASLt; and the SASS of one kernel of
  # each (H8_SASS_FUN, mangled)
  [ -f .h8carry/var.tar.xz ] && tar xJf .h8carry/var.tar.xz -C $BIN
  for b in h8_bench ${H8_VARS:-}; do
    [ -n "${H8_SASS_FUN:-}" ] && cuobjdump -sass -fun "$H8_SASS_FUN" $BIN/$b > "$L/sass_$b.txt" 2>&1
  done
  for pass in 1 2; do
    for b in h8_bench ${H8_VARS:-}; do
      timeout 150 $BIN/$b --only dense --quick --reps 20 ${H8_AB_ARGS:-} > "$L/ab_${b}_$pass.log" 2>&1; echo "ab $b pass $pass rc=$?"
      python3 scripts/gpu/h8_top.py "$L/ab_${b}_$pass.log" ratio
    done
  done
fi
if has splits; then  # split-K sweep of the M = 128 shapes (with the cuBLASLt baselines)
  timeout 240 $BIN/h8_bench --split-sweep --only dense --reps 20 > "$L/splits.log" 2>&1; echo "splits rc=$?"
  sed -n '/^family/,$p' "$L/splits.log" | cut -c1-150
fi
if has floor; then  # M = 128: ours, cuBLASLt and a read-only kernel, with the memset flush and with a clean flush
  for fl in "" --clean-flush; do
    timeout 60 $BIN/h8_bench --floor --only dense --reps 30 $fl > "$L/floor$fl.log" 2>&1; echo "floor $fl rc=$?"
    sed -n '/^family/,$p' "$L/floor$fl.log" | grep -E "heur|floor|cublaslt fp8 1x" | cut -c1-120
  done
fi
if has rows192; then  # 128- vs 192-row tiles at block_n 128 (production and the cost-split experiments)
  timeout 150 $BIN/h8_bench --rows192 ${H8_ROWS192_ARGS:---experiments --only dense} --no-baselines --reps 10 > "$L/rows192.log" 2>&1
  echo "rows192 rc=$?"
  sed -n '/^family/,$p' "$L/rows192.log" | grep -E "^dense +(4096|8192)|^wgrad" | cut -c1-120
fi
if has sweep; then
  timeout 300 $BIN/h8_bench --sweep --only ${H8_SWEEP_ONLY:-dense} ${H8_SWEEP_ARGS:---quick} --no-baselines --reps 10 > "$L/sweep.log" 2>&1; echo "sweep rc=$?"
  # per shape: the heuristic's row and the five fastest
  python3 scripts/gpu/h8_top.py "$L/sweep.log" ${H8_TOP:-5}
fi
if has source; then
  cfg="${H8_PROFILE_CONFIG:-4096 7168 16384 176 0}"
  timeout 200 ncu --clock-control none --launch-skip 2 --launch-count 1 -k regex:fp8_gemm_kernel \
    --section WarpStateStats --section SourceCounters --section SpeedOfLight --section MemoryWorkloadAnalysis_Tables \
    -o "$L/prof" $BIN/h8_bench --profile $cfg > "$L/ncu.log" 2>&1; echo "ncu rc=$?"
  ncu --import "$L/prof.ncu-rep" --page source --csv --print-source sass > "$L/source.csv" 2> "$L/source.err"
  echo "source rc=$? lines=$(wc -l < "$L/source.csv")"; head -c 600 "$L/source.err"
  head -3 "$L/source.csv" | cut -c1-400
  ncu --import "$L/prof.ncu-rep" --page details > "$L/details.txt" 2>&1
  grep -E "Duration|SM Frequency|Compute \(SM\) Throughput|Shared|Bank" "$L/details.txt" | head -20
fi
nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv >> "$L/info.txt" 2>&1
kill $SMI 2>/dev/null
tar czf "$final/logs.tar.gz" -C "$final" logs && rm -rf "$L"
echo "done in ${SECONDS}s"
