#!/usr/bin/env bash
# Packs what scripts/gpu/h4_run.sh needs on the device machine into .h4carry/ (ignored by git, named in the
# device call's `carry`): the fp8train CLI and test_cuda from BUILD_DIR (default build-h4), and the Debian
# shared libraries they link that the device image lacks, as one xz archive.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD_DIR:-build-h4}
mkdir -p .h4carry/bin
cp "$build/fp8train" "$build/tests/test_cuda" .h4carry/bin/
if [ ! -f .h4carry/libs.tar.xz ]; then
  tmp=$(mktemp -d)
  mkdir "$tmp/libs"
  for lib in libopenblas.so.0 libgfortran.so.5 libquadmath.so.0 libfmt.so.9 libgomp.so.1; do
    path=$(ldd "$build/fp8train" | awk -v l="$lib" '$1 == l {print $3}')
    [ -n "$path" ] && cp -L "$path" "$tmp/libs/"
  done
  tar cJf .h4carry/libs.tar.xz -C "$tmp" libs
  rm -rf "$tmp"
fi
du -sh .h4carry
