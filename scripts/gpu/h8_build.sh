#!/usr/bin/env bash
# Builds, on this (GPU-less) machine, the two self-contained programs that scripts/gpu/h8_run*.sh runs on the
# H200: .h8carry/h8_tests (tests/cuda/fp8_gemm_*_test.cpp with a GoogleTest main) and .h8carry/h8_bench
# (scripts/gpu/h8_bench.cpp). Everything but the GPU driver and cuBLASLt is linked statically (CUDA runtime,
# libstdc++, libgomp, GoogleTest; fmt header-only; no OpenBLAS: see h8_cblas_stub.cpp), so the binaries run on the device machine's
# image without its packages. .h8carry/ is git-ignored (.git/info/exclude) and travels with `carry`.
# Usage: bash scripts/gpu/h8_build.sh [-j N]     (incremental: a source is rebuilt when newer than its object)
set -euo pipefail
cd "$(dirname "$0")/../.."
JOBS=2
[[ "${1:-}" == "-j" ]] && JOBS="$2"
OUT=.h8carry/bin
OBJ=.h8carry/obj
mkdir -p "$OBJ" "$OUT"

CUDA=/usr/local/cuda
NVCC="$CUDA/bin/nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Isrc -DFP8TRAIN_HAVE_CUDA=1 -lineinfo"
CXX="g++ -std=c++20 -O2 -fopenmp -Isrc -I$CUDA/include -DFMT_HEADER_ONLY -DFP8TRAIN_HAVE_CUDA=1 -Wall -Wextra"
BLAS_INC=$(pkg-config --cflags openblas)

CU_SRCS=(src/ops/cuda/fp8_gemm_dense.cu src/ops/cuda/fp8_gemm_grouped.cu src/ops/cuda/fp8_gemm_wgrad.cu
         src/ops/cuda/gemm_scales.cu)
LIB_SRCS=(src/ops/cuda/fp8_gemm_host.cpp src/ops/cuda/fp8_gemm_dispatch.cpp src/common/error.cpp src/numerics/hopper_accum.cpp
          src/tensor/cuda/caching_allocator.cpp src/tensor/cuda/device.cpp src/tensor/cuda/cuda_check.cpp
          src/ops/cuda/cublaslt_gemm.cpp)
# The reference GEMM (hopper mode) for the tests; its exact mode's DGEMM is stubbed (h8_cblas_stub.cpp).
TEST_SRCS=(src/quant/quant.cpp src/quant/ref_gemm.cpp src/quant/ref_gemm_simd.cpp scripts/gpu/h8_cblas_stub.cpp
           tests/cuda/fp8_gemm_dense_test.cpp tests/cuda/fp8_gemm_grouped_test.cpp
           tests/cuda/fp8_gemm_wgrad_test.cpp tests/cuda/fp8_gemm_dispatch_test.cpp scripts/gpu/h8_gtest_main.cpp)
BENCH_SRCS=(scripts/gpu/h8_bench.cpp scripts/gpu/h8_experiments.cu)

obj_of() { echo "$OBJ/$(echo "$1" | tr '/' '_').o"; }

up_to_date() {  # obj: exists, and neither its source nor any header it included (from the .d file) is newer
  local obj=$1
  [[ -f "$obj" && -f "$obj.d" ]] || return 1
  local dep
  for dep in $(sed -e 's/^[^:]*://' -e 's/\\$//' "$obj.d"); do
    [[ -e "$dep" && "$dep" -nt "$obj" ]] && return 1
  done
  return 0
}

compile() {  # src
  local src=$1 obj
  obj=$(obj_of "$src")
  up_to_date "$obj" && return 0
  case "$src" in
    *.cu) $NVCC -MD -MF "$obj.d" -c "$src" -o "$obj" || return 1 ;;
    src/quant/*) $CXX $BLAS_INC -ffp-contract=off -MMD -MF "$obj.d" -c "$src" -o "$obj" || return 1 ;;
    *) $CXX $BLAS_INC -MMD -MF "$obj.d" -c "$src" -o "$obj" || return 1 ;;
  esac
  echo "built $obj"
}
export -f compile obj_of up_to_date
export NVCC CXX BLAS_INC OBJ

printf '%s\n' "${CU_SRCS[@]}" "${LIB_SRCS[@]}" "${TEST_SRCS[@]}" "${BENCH_SRCS[@]}" | xargs -P "$JOBS" -I{} bash -c 'compile {}'

objs() { for s in "$@"; do obj_of "$s"; done; }
GOMP=$(g++ -print-file-name=libgomp.a)
LINK="g++ -fopenmp -static-libstdc++ -static-libgcc -s"
LIBS="-L$CUDA/lib64 -lcudart_static -lcublasLt $GOMP -ldl -lpthread -lrt"
$LINK -o $OUT/h8_tests $(objs "${CU_SRCS[@]}" "${LIB_SRCS[@]}" "${TEST_SRCS[@]}") \
  -Wl,-Bstatic -lgtest -Wl,-Bdynamic $LIBS
$LINK -o $OUT/h8_bench $(objs "${CU_SRCS[@]}" "${LIB_SRCS[@]}" "${BENCH_SRCS[@]}") $LIBS
ls -la $OUT/h8_tests $OUT/h8_bench
ldd $OUT/h8_tests | sed 's/^/  /'
