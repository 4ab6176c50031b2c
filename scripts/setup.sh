#!/usr/bin/env bash
# Installs what fp8train needs to build on Debian 12 (bookworm): run as root it installs the missing
# packages; otherwise it prints the exact apt-get line and fails. CUDA (nvcc, cuBLASLt) is optional
# and not installed here: CMake finds it when present.
set -euo pipefail
# libprotobuf-dev, protobuf-compiler: TensorBoard event files (protobuf records).
# libopenmpi-dev, openmpi-bin: distributed training on CPU ranks (src/dist/, the `mpi` tests).
# libsentencepiece-dev: the subword tokenizer (fp8train tokenizer train, --tokenizer).
packages=(build-essential cmake pkg-config git libcli11-dev nlohmann-json3-dev libfmt-dev libgtest-dev
          libgmock-dev libbenchmark-dev libopenblas-dev libprotobuf-dev protobuf-compiler libopenmpi-dev openmpi-bin
          libsentencepiece-dev)
missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: missing Debian packages. Install them with:" >&2
  echo "  sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
