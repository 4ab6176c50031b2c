#!/usr/bin/env python3
"""Experiment tool (issue 8): read, or rewrite, the scheduling hints of the FFMA instructions in the FP8 GEMM
kernels of a binary (an object file or an executable) whose fatbinary holds uncompressed sm_90a cubins.

Why: DeepGEMM reported +10 % on FP8 GEMMs from flipping the yield and reuse bits of the promotion FFMAs in
the compiled code (nvcc 12.3 had started to alternate the yield bit on FADDs in CUTLASS kernels). This tool
shows what ptxas 13.0 already emits there and writes variants to time against it. It changes scheduling hints
only (the yield bit and the operand-reuse cache bits), never what an instruction computes, so the kernels stay
bit-exact.

Encoding (Volta and later, 128-bit instructions; Jia et al., "Dissecting the NVIDIA Volta GPU Architecture via
Microbenchmarking", 2018): opcode in the low 12 bits of the first 64-bit word (0x223: FFMA with three register
sources); in the second word, bits 41-44 stall cycles, bit 45 yield, 46-48 / 49-51 write / read barrier, 52-57
wait mask, 58-61 reuse flags.

Usage: ffma_yield.py scan BINARY
       ffma_yield.py verify SASS_LISTING   (cuobjdump -sass output: the mnemonics this tool would touch)
       ffma_yield.py MODE BINARY OUT     MODE: all1 (yield bit set on every FFMA), all0 (yield bit clear and no
                                          reuse on every FFMA), pairs (bit set on the first, clear on the second
                                          of each pair, what ptxas emits in the promotion, for a check)
"""
import struct
import sys

EM_CUDA = 190
YIELD = 1 << 45
REUSE = 0xF << 58
KERNEL = "fp8_gemm_kernel"


def cubin_offsets(data):
    i = 0
    while True:
        i = data.find(b"\x7fELF", i)
        if i < 0:
            return
        if data[i + 4] == 2 and struct.unpack_from("<H", data, i + 0x12)[0] == EM_CUDA:
            yield i
        i += 4


def text_sections(data, base):
    shoff = struct.unpack_from("<Q", data, base + 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, base + 0x3A)
    hdrs = [struct.unpack_from("<IIQQQQIIQQ", data, base + shoff + k * shentsize) for k in range(shnum)]
    strtab = base + hdrs[shstrndx][4]
    for h in hdrs:
        end = data.index(b"\0", strtab + h[0])
        name = data[strtab + h[0]:end].decode()
        if name.startswith(".text.") and KERNEL in name:
            yield name[6:], base + h[4], h[5]


def ffmas(data, off, size):
    for j in range(size // 16):
        lo, hi = struct.unpack_from("<QQ", data, off + 16 * j)
        if (lo & 0xFFF) == 0x223:
            yield off + 16 * j, lo, hi


def verify(sass_path):
    """Every instruction of a `cuobjdump -sass` listing whose encoding this tool takes for FFMA, by mnemonic."""
    import collections
    import re
    seen = collections.Counter()
    lines = open(sass_path).read().splitlines()
    for i, line in enumerate(lines):
        m = re.search(r"/\*[0-9a-f]{4,}\*/\s+(.*?);\s*/\* (0x[0-9a-f]{16}) \*/", line)
        if m and (int(m.group(2), 16) & 0xFFF) == 0x223:
            seen[m.group(1).split()[0] if not m.group(1).startswith("@") else m.group(1).split()[1]] += 1
    print("instructions with opcode 0x223, by mnemonic:", dict(seen))
    return 0 if set(seen) <= {"FFMA"} else 1


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    mode, path = sys.argv[1], sys.argv[2]
    if mode == "verify":
        return verify(path)
    data = bytearray(open(path, "rb").read())
    kernels = changed = total = 0
    for base in list(cubin_offsets(data)):
        for name, off, size in text_sections(data, base):
            kernels += 1
            seq = list(ffmas(data, off, size))
            total += len(seq)
            if mode == "scan":
                pattern = "".join("Y" if hi & YIELD else "y" for _, _, hi in seq)
                print(f"{name[:100]} ffma={len(seq)} yield-set={pattern.count('Y')} {pattern[:80]}")
                continue
            for idx, (at, lo, hi) in enumerate(seq):
                if mode == "all1":
                    new = hi | YIELD
                elif mode == "all0":
                    new = hi & ~YIELD & ~REUSE
                elif mode == "pairs":
                    new = (hi | YIELD) if idx % 2 == 0 else (hi & ~YIELD & ~REUSE)
                else:
                    print(f"unknown mode {mode}")
                    return 2
                if new != hi:
                    struct.pack_into("<Q", data, at + 8, new)
                    changed += 1
    print(f"{path}: {kernels} kernel sections, {total} FFMAs, {changed} rewritten ({mode})")
    if kernels == 0:
        print("no uncompressed sm_90a cubin with FP8 GEMM kernels found")
        return 1
    if mode != "scan":
        with open(sys.argv[3], "wb") as f:
            f.write(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
