#!/usr/bin/env python3
"""Builds the loss-parity study's corpus from the Python sources of a directory tree (by default the
site-packages directory that holds the running interpreter's PyTorch), by a fixed rule:

  1. every regular file under ROOT whose name ends in ".py" (symbolic links not followed), at most
     --max-file-bytes bytes, that decodes as strict UTF-8 and contains no NUL byte;
  2. ordered by the SHA-256 of its path relative to ROOT (a deterministic shuffle: the held-out tail that
     `fp8train train --eval-fraction F` takes is then a random sample of files, not one package);
  3. concatenated, each file followed by one "\n".

It writes OUT (the corpus) and OUT.json (the rule, the root, the file and byte counts, and the SHA-256 of the
corpus, which identifies it in the results). The same image gives the same bytes; the hash says whether two
machines did."""
import argparse
import hashlib
import json
import os
import sys


def python_files(root, max_bytes):
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for name in filenames:
            if not name.endswith(".py"):
                continue
            path = os.path.join(dirpath, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            if os.path.getsize(path) > max_bytes:
                continue
            yield path


def default_root():
    import importlib.util
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        sys.exit("make_corpus: no --root given and PyTorch is not importable here (its site-packages is the default)")
    return os.path.dirname(os.path.dirname(spec.origin))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", help="directory to collect (default: the site-packages holding torch)")
    ap.add_argument("--out", required=True, help="corpus file to write (OUT.json beside it)")
    ap.add_argument("--max-file-bytes", type=int, default=1 << 20)
    args = ap.parse_args()
    root = os.path.realpath(args.root or default_root())
    if not os.path.isdir(root):
        sys.exit(f"make_corpus: '{root}' is not a directory")

    entries = []
    skipped = {"not_utf8": 0, "nul": 0}
    for path in python_files(root, args.max_file_bytes):
        with open(path, "rb") as f:
            data = f.read()
        if b"\0" in data:
            skipped["nul"] += 1
            continue
        try:
            data.decode("utf-8", errors="strict")
        except UnicodeDecodeError:
            skipped["not_utf8"] += 1
            continue
        rel = os.path.relpath(path, root)
        entries.append((hashlib.sha256(rel.encode("utf-8")).hexdigest(), rel, data))
    if not entries:
        sys.exit(f"make_corpus: no Python files under '{root}'")
    entries.sort()

    digest = hashlib.sha256()
    tmp = args.out + ".partial"
    total = 0
    with open(tmp, "wb") as f:
        for _, _, data in entries:
            chunk = data + b"\n"
            f.write(chunk)
            digest.update(chunk)
            total += len(chunk)
    os.replace(tmp, args.out)  # never a half-written corpus under the final name
    info = {
        "rule": "*.py under root, <= max_file_bytes, strict UTF-8, no NUL; ordered by sha256(relative path); "
                "each file followed by a newline",
        "root": root,
        "max_file_bytes": args.max_file_bytes,
        "files": len(entries),
        "skipped": skipped,
        "bytes": total,
        "sha256": digest.hexdigest(),
        "first_files": [rel for _, rel, _ in entries[:3]],
        "last_files": [rel for _, rel, _ in entries[-3:]],
    }
    with open(args.out + ".json", "w") as f:
        json.dump(info, f, indent=1)
        f.write("\n")
    print(json.dumps({k: info[k] for k in ("root", "files", "bytes", "sha256")}))


if __name__ == "__main__":
    main()
