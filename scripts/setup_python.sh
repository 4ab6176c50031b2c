#!/usr/bin/env bash
# Installs the Python test oracles (tests/python/requirements.txt, torch-requirements.txt: transformers, torch,
# safetensors, ml_dtypes, sentencepiece) for python3. Run as root it installs what is missing; otherwise it
# prints the exact pip lines and fails. The C++ build needs none of this: only the `oracle` tests do.
# torch: PyPI's Linux wheel pulls ~3 GB of CUDA libraries (download.pytorch.org's CPU wheels are out of reach), so
# torch goes in with --no-deps plus the four CUDA libraries it links that the CUDA 13 toolkit lacks (~1.1 GB
# download); if that torch does not import (a machine without the toolkit), the full install follows.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
req=tests/python/requirements.txt
torch_req=tests/python/torch-requirements.txt

# Every pinned package present at its version, and torch able to run a CPU matmul?
check() {
  "$py" - "$req" "$torch_req" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version, PackageNotFoundError
for path in sys.argv[1:]:
    for line in open(path):
        line = line.split("#")[0].strip()
        if not line:
            continue
        name, want = line.split("==")
        try:
            if version(name) != want:
                sys.exit(1)
        except PackageNotFoundError:
            sys.exit(1)
import torch
assert float(torch.ones(3) @ torch.ones(3)) == 3.0
PY
}

if check; then
  exit 0
fi
pip=("$py" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore)
if [ "$(id -u)" -ne 0 ] && [ -z "${VIRTUAL_ENV:-}" ]; then
  echo "setup_python: the Python oracles are missing or not at their pinned versions. Install them with:" >&2
  echo "  $py -m pip install -r $req && $py -m pip install --no-deps -r $torch_req" >&2
  exit 1
fi
echo "setup_python: installing the Python oracles ($req, $torch_req)"
start=$(date +%s)
"${pip[@]}" -r "$req"
"${pip[@]}" --no-deps -r "$torch_req"
if ! check; then
  echo "setup_python: torch without its CUDA dependencies does not import here; installing them (~3 GB)"
  "${pip[@]}" "$(grep -E '^torch==' "$torch_req")"
fi
check || { echo "setup_python: the oracles still do not import after installing" >&2; exit 1; }
echo "setup_python: done in $(( $(date +%s) - start )) s"
