"""Shared by the Python oracle tests: the fp8train binary, packages that must be present, scratch folders.

A missing package fails the test (never a skip), naming the line that installs it.
"""
import importlib
import os
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INSTALL = (
    "bash scripts/setup_python.sh   (or: python3 -m pip install -r tests/python/requirements.txt"
    " && python3 -m pip install --no-deps -r tests/python/torch-requirements.txt)")


def require(*modules):
    """Imports each module, or exits 1 naming what is missing and how to install it."""
    loaded = []
    for name in modules:
        try:
            loaded.append(importlib.import_module(name))
        except ImportError as e:
            sys.stderr.write(f"FAILED: the oracle needs the Python package '{name}' ({e}).\nInstall: {INSTALL}\n")
            sys.exit(1)
    return loaded[0] if len(loaded) == 1 else loaded


def cli():
    """The fp8train binary: $FP8TRAIN_CLI (set by ctest), else build/fp8train."""
    path = os.environ.get("FP8TRAIN_CLI", os.path.join(REPO, "build", "fp8train"))
    if not os.access(path, os.X_OK):
        sys.stderr.write(f"FAILED: no fp8train binary at '{path}' (build it, or set FP8TRAIN_CLI)\n")
        sys.exit(1)
    return path


def run(*args, check=True):
    """Runs fp8train with `args`; returns the CompletedProcess (text). Raises on a non-zero exit when `check`."""
    p = subprocess.run([cli(), *map(str, args)], capture_output=True, text=True)
    if check and p.returncode != 0:
        raise AssertionError(f"fp8train {' '.join(map(str, args))} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
    return p


# A tiny model trained a few steps in the fp32 recipe: two expert groups, a routed scaling factor, router biases
# that moved, an MTP module — every part the Hugging Face export maps. Seconds on one core.
TINY_TRAIN = ["train", "--preset", "tiny", "--steps", "3", "--batch-size", "4", "--seq-len", "32",
              "--final-eval-windows", "4", "--eval-batches", "1", "--corpus-bytes", "20000", "--recipe", "fp32",
              "--threads", "2", "--n-group", "2", "--topk-group", "1", "--routed-scaling-factor", "2.5",
              "--bias-update-speed", "0.05"]


class Scratch:
    """A temporary folder removed on exit."""

    def __enter__(self):
        self.path = tempfile.mkdtemp(prefix="fp8train-oracle-")
        return self.path

    def __exit__(self, *exc):
        shutil.rmtree(self.path, ignore_errors=True)
