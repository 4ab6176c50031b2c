"""Oracle: the official safetensors library reads every safetensors file fp8train writes — a checkpoint's
model.safetensors (FP32 or BF16 weights), master.safetensors, optimizer.safetensors (FP32 or BF16 moments),
recipe_state.safetensors (fp8-tensorwise's amax histories), and the Hugging Face export's model.safetensors —
with the names, dtypes, shapes, bytes and metadata of the file's own header."""
import glob
import json
import os
import struct
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle  # noqa: E402

torch, safetensors = oracle.require("torch", "safetensors")
from safetensors import safe_open  # noqa: E402

DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
          "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
          "BOOL": torch.bool, "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2}


class SafetensorsFiles(unittest.TestCase):
    def check_file(self, path):
        with open(path, "rb") as f:
            raw = f.read()
        n = struct.unpack("<Q", raw[:8])[0]
        header = json.loads(raw[8:8 + n])
        meta = header.pop("__metadata__", None)
        self.assertTrue(header, f"{path} holds no tensor")
        with safe_open(path, framework="pt") as st:
            self.assertEqual(set(st.keys()), set(header), path)
            self.assertEqual(st.metadata(), meta, path)
            for name, h in header.items():
                t = st.get_tensor(name)
                self.assertEqual(t.dtype, DTYPES[h["dtype"]], f"{path}: {name}")
                self.assertEqual(list(t.shape), h["shape"], f"{path}: {name}")
                begin, end = h["data_offsets"]
                got = t.contiguous().view(torch.uint8).numpy().tobytes() if t.numel() else b""
                self.assertEqual(got, raw[8 + n + begin:8 + n + end], f"{path}: {name}")
        return {h["dtype"] for h in header.values()}

    def test_every_file_of_every_recipe(self):
        with oracle.Scratch() as d:
            seen = {}
            for recipe, extra in [("fp32", []), ("bf16", ["--moment-dtype", "bf16"]), ("fp8-tensorwise", [])]:
                run = os.path.join(d, recipe)
                args = [a for a in oracle.TINY_TRAIN]
                args[args.index("--recipe") + 1] = recipe
                oracle.run(*args, *extra, "--out", run)
                files = sorted(glob.glob(os.path.join(run, "checkpoints", "step-*", "*.safetensors")))
                names = {os.path.basename(f) for f in files}
                self.assertTrue({"model.safetensors", "master.safetensors", "optimizer.safetensors"} <= names, names)
                for f in files:
                    seen[f"{recipe}/{os.path.basename(f)}"] = self.check_file(f)
            hf = os.path.join(d, "hf")
            oracle.run("export", "--format", "hf", "--checkpoint", os.path.join(d, "fp32"), "--out", hf)
            seen["hf/model.safetensors"] = self.check_file(os.path.join(hf, "model.safetensors"))
            print("\n".join(f"{k}: {sorted(v)}" for k, v in sorted(seen.items())))
            self.assertIn("fp8-tensorwise/recipe_state.safetensors", seen)
            self.assertEqual(seen["bf16/model.safetensors"], {"BF16", "F32"})  # weights BF16, router biases F32
            self.assertIn("BF16", seen["bf16/optimizer.safetensors"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
