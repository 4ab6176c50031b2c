#!/usr/bin/env bash
# One device-machine call for the CUDA backend I work (issue 7): runs the GPU tests, the benchmarks and a
# SASS look at the quantization kernels, writing logs under $OUT (or ./out-h4 when OUT is unset).
#
# The binaries are built on the development machine (the device image has no fmt/CLI11/GoogleTest) and
# carried in .h4carry/ (see scripts/gpu/h4_pack.sh): bin/fp8train, bin/test_cuda and libs.tar.xz with the
# Debian shared libraries they need (OpenBLAS, fmt, gomp, gfortran, quadmath). CUDA's own libraries
# (cudart, cuBLASLt) are taken from the device machine.
# Usage: bash scripts/gpu/h4_run.sh [tests|bench|quick|all] (default all; quick = tests + bench, 10 repeats)
set -uo pipefail
cd "$(dirname "$0")/../.."
what=${1:-all}
out=${OUT:-out-h4}
mkdir -p "$out"
carry=.h4carry
tar xJf "$carry/libs.tar.xz" -C /tmp
libdirs=/tmp/libs
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -e "$d/libcublasLt.so.13" ] && libdirs="$libdirs:$d"
done
if ! echo "$libdirs" | grep -q cuda; then
  found=$(find / -name 'libcublasLt.so.13' -not -path '*/proc/*' 2>/dev/null | head -1)
  [ -n "$found" ] && libdirs="$libdirs:$(dirname "$found")"
  found=$(find / -name 'libcudart.so.13' -not -path '*/proc/*' 2>/dev/null | head -1)
  [ -n "$found" ] && libdirs="$libdirs:$(dirname "$found")"
fi
export LD_LIBRARY_PATH="$libdirs:${LD_LIBRARY_PATH:-}"
chmod +x "$carry"/bin/*

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem,power.limit --format=csv
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  ldd "$carry/bin/fp8train" | grep -E "cublas|cudart|not found"
} > "$out/env.txt" 2>&1
cat "$out/env.txt"

repeats=20
[ "$what" = quick ] && repeats=10
if [ "$what" = tests ] || [ "$what" = all ] || [ "$what" = quick ]; then
  echo "=== gpu tests"
  # cuBLASLt reports the reason for a refused problem at log level 1 (errors only).
  CUBLASLT_LOG_LEVEL=1 timeout 420 "$carry/bin/test_cuda" --gtest_color=no 2>&1 | tee "$out/gpu_tests.log" | grep -E "^\[  (FAILED|PASSED|  OK) |^FINDING|^cuBLASLt plan|Failure|error|^gpu_tests|Expected|Which is|actual|first" | head -150
  echo "test_cuda exit: ${PIPESTATUS[0]}"
fi

if [ "$what" = bench ] || [ "$what" = all ] || [ "$what" = quick ]; then
  echo "=== bench quant"
  timeout 240 "$carry/bin/fp8train" bench quant --mib 256 --repeats $repeats > "$out/bench_quant.jsonl" 2> "$out/bench_quant.txt"
  echo "bench quant exit: $?"
  cat "$out/bench_quant.txt"
  echo "=== bench gemm"
  timeout 300 "$carry/bin/fp8train" bench gemm --repeats $repeats > "$out/bench_gemm.jsonl" 2> "$out/bench_gemm.txt"
  echo "bench gemm exit: $?"
  cat "$out/bench_gemm.txt"
fi

if [ "$what" = all ] && command -v compute-sanitizer > /dev/null; then
  echo "=== compute-sanitizer memcheck (quantizer and infrastructure tests)"
  timeout 90 compute-sanitizer --tool memcheck --print-limit 20 "$carry/bin/test_cuda" --gtest_color=no \
    --gtest_filter='QuantizeGpu.*:InfraGpu.DeviceAndPinnedBuffersRoundTrip:InfraGpu.TensorsLiveOnTheCudaBackend:GemmGpu.Fp8BlockScaledBf16OutputAndE5M2Activations' \
    > "$out/memcheck.log" 2>&1
  echo "memcheck exit: $?"
  grep -E "ERROR SUMMARY|PASSED|FAILED|Invalid" "$out/memcheck.log" | head -20
fi

if [ "$what" = all ] && command -v cuobjdump > /dev/null; then
  # Instruction mix of the fused 1x128 + 128x1 kernel (bf16 in, E4M3, hardware and software encoders).
  for enc in 1 0; do
    fn=$(cuobjdump -symbols "$carry/bin/fp8train" 2>/dev/null | grep -o "_Z[^ ]*quant_1x128_kernelILNS1_6InTypeE1ELNS1_10CodeFormatE0ELNS1_7EncoderE${enc}ELb0EEEvNS2_10FastParamsE" | head -1)
    [ -z "$fn" ] && continue
    cuobjdump -sass -fun "$fn" "$carry/bin/fp8train" > /tmp/sass_$enc.txt 2>&1
    echo "=== SASS histogram, quant_1x128 bf16 e4m3 encoder=$enc (1 = hardware)" | tee -a "$out/sass.txt"
    grep -oE '^\s+/\*[0-9a-f]{4}\*/\s+[A-Z0-9_.]+' /tmp/sass_$enc.txt | awk '{print $2}' | sed 's/\..*//' | sort | uniq -c | sort -rn | head -25 | tr '\n' ' ' | tee -a "$out/sass.txt"
    echo "instructions: $(grep -cE '^\s+/\*[0-9a-f]{4}\*/' /tmp/sass_$enc.txt)" | tee -a "$out/sass.txt"
  done
fi
