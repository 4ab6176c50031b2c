"""Oracle: ml_dtypes agrees with fp8train's E4M3 / E5M2 codecs (numerics/formats.h, run through
`fp8train numerics codec`), encoding float32 to codes and decoding every code.

Encoding, per format, in both saturation modes fp8train has, with ml_dtypes' NaN codes (sign kept):
  nonsat:    fp8train's code == ml_dtypes' cast (E4M3: overflow and Inf become NaN; E5M2: they become Inf);
  satfinite: fp8train's code == ml_dtypes' cast of the input clipped to ±max (what the recipes use).
Inputs: a sample of 2^20 (every FP8 value, every midpoint between neighbours (ties) and one float32 ulp either
side, the overflow boundary, zeros, Infs, NaNs, float32 subnormals, and random bit patterns) by default; every one
of the 2^32 float32 bit patterns with --all (ctest label `long`).
"""
import argparse
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle  # noqa: E402

np, ml_dtypes = oracle.require("numpy", "ml_dtypes")

FORMATS = {"e4m3": (ml_dtypes.float8_e4m3fn, 448.0), "e5m2": (ml_dtypes.float8_e5m2, 57344.0)}
ALL = False


def sample_inputs(fmt):
    """2^20 float32 inputs: the hard cases of `fmt`, then random bit patterns."""
    dtype, _ = FORMATS[fmt]
    values = np.arange(256, dtype=np.uint8).view(dtype).astype(np.float32)
    finite = np.unique(values[np.isfinite(values)])
    mids = (finite[:-1].astype(np.float64) + finite[1:]) / 2  # exact in float32: one more mantissa bit
    mids = mids.astype(np.float32)
    near = [finite, mids, np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(-np.inf)),
            np.nextafter(finite, np.float32(np.inf)), np.nextafter(finite, np.float32(-np.inf))]
    top = finite.max()
    ulp = np.float32(top) - finite[finite < top].max()
    edge = np.array([top + ulp / 2, top + ulp / 2 * 1.0000001, top + ulp, 1e30, np.finfo(np.float32).max], np.float32)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-45, -1e-45, 1.17e-38], np.float32)
    bits = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FFFFFFF, 0x00000001, 0x007FFFFF],
                    np.uint32).view(np.float32)
    hard = np.concatenate([*near, edge, -edge, special, bits]).astype(np.float32)
    rng = np.random.default_rng(20260101)
    rand = rng.integers(0, 2**32, size=(1 << 20) - hard.size, dtype=np.uint64).astype(np.uint32).view(np.float32)
    return np.concatenate([hard, rand])


def theirs(x, fmt, saturation):
    dtype, top = FORMATS[fmt]
    if saturation == "satfinite":
        x = np.clip(x, -top, top)  # NaN stays NaN
    with np.errstate(all="ignore"):
        return x.astype(dtype).view(np.uint8)


class Fp8Codecs(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.scratch = oracle.Scratch()
        cls.dir = cls.scratch.__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.scratch.__exit__(None, None, None)

    def ours_encode(self, fmt, saturation, x=None, bits_from=None, count=None):
        out = os.path.join(self.dir, "codes.u8")
        args = ["numerics", "codec", "--format", fmt, "--saturation", saturation, "--nan", "ml_dtypes", "--out", out]
        if x is not None:
            path = os.path.join(self.dir, "in.f32")
            x.astype("<f4").tofile(path)
            args += ["--in", path]
        else:
            args += ["--bits-from", bits_from, "--count", count]
        oracle.run(*args)
        return np.fromfile(out, dtype=np.uint8)

    def check(self, fmt, saturation, x, ours):
        want = theirs(x, fmt, saturation)
        bad = np.nonzero(ours != want)[0]
        if bad.size:
            i = bad[0]
            self.fail(f"{fmt} {saturation}: {bad.size} of {x.size} codes differ; first: float32 bits "
                      f"{x[i:i+1].view(np.uint32)[0]:#010x} ({x[i]!r}): fp8train {ours[i]:#04x}, ml_dtypes {want[i]:#04x}")

    def test_encode(self):
        for fmt in FORMATS:
            for saturation in ("nonsat", "satfinite"):
                with self.subTest(fmt=fmt, saturation=saturation):
                    if not ALL:
                        x = sample_inputs(fmt)
                        self.check(fmt, saturation, x, self.ours_encode(fmt, saturation, x=x))
                        continue
                    chunk = 1 << 26
                    for start in range(0, 1 << 32, chunk):
                        x = np.arange(start, start + chunk, dtype=np.uint64).astype(np.uint32).view(np.float32)
                        self.check(fmt, saturation, x, self.ours_encode(fmt, saturation, bits_from=start, count=chunk))
                    print(f"{fmt} {saturation}: all 2^32 float32 inputs agree", flush=True)

    def test_decode_every_code(self):
        for fmt, (dtype, _) in FORMATS.items():
            out = os.path.join(self.dir, "values.f32")
            oracle.run("numerics", "codec", "--format", fmt, "--decode", "--out", out)
            ours = np.fromfile(out, dtype="<f4")
            want = np.arange(256, dtype=np.uint8).view(dtype).astype(np.float32)
            np.testing.assert_array_equal(np.isnan(ours), np.isnan(want))
            ok = ~np.isnan(want)
            np.testing.assert_array_equal(ours[ok].view(np.uint32), want[ok].view(np.uint32))  # -0.0 too


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--all", action="store_true", help="every 2^32 float32 input (minutes)")
    args, rest = parser.parse_known_args()
    ALL = args.all
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
