#!/usr/bin/env python3
"""Summarises an h8_bench log (its JSON lines): per family and shape, the heuristic's row and the N fastest;
with N = ratio, one line per shape: the heuristic's TFLOP/s, cuBLASLt's, and their ratio.
Usage: h8_top.py LOG [N|ratio]"""
import json
import sys

rows = {}
for line in open(sys.argv[1]):
    if line.startswith("JSON "):
        r = json.loads(line[5:])
        rows.setdefault((r["family"], r["shape"]), []).append(r)
if len(sys.argv) > 2 and sys.argv[2] == "ratio":
    for (family, shape), rs in rows.items():
        ours = [r for r in rs if "heur" in r["variant"]]
        lt = [r for r in rs if r["variant"].startswith("cublaslt fp8 1x")]
        if ours and lt:
            print(f"{shape:18} {ours[0]['tflops']:7.1f} {lt[0]['tflops']:7.1f} {ours[0]['tflops'] / lt[0]['tflops']:6.3f}")
    sys.exit(0)
n = int(sys.argv[2]) if len(sys.argv) > 2 else 5
for (family, shape), rs in rows.items():
    best = sorted(rs, key=lambda r: -r["tflops"])
    show = best[:n] + [r for r in best[n:] if "heur" in r["variant"] or (n == 0 and "cublaslt fp8 1x" in r["variant"])]
    for r in show:
        print(f"{family:7} {shape:18} {r['variant'][:34]:34} {r['ms'] * 1000:9.1f} us {r['tflops']:7.1f}  {r['note'][:24]}")
