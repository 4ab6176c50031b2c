"""Oracle: transformers loads `fp8train export --format hf` as DeepseekV3ForCausalLM, and its FP32 logits equal
fp8train's (fp8train logits, fp32 recipe) within 1e-4 relative on a fixed input."""
import json
import os
import struct
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle  # noqa: E402

np, torch, transformers, safetensors = oracle.require("numpy", "torch", "transformers", "safetensors")
from safetensors.numpy import load_file  # noqa: E402

TEXT = "Hello, world! fp8train exports DeepSeek-V3 to transformers."


class HfExport(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.scratch = oracle.Scratch()
        d = cls.scratch.__enter__()
        cls.run_dir = os.path.join(d, "run")
        cls.hf_dir = os.path.join(d, "hf")
        oracle.run(*oracle.TINY_TRAIN, "--out", cls.run_dir)
        oracle.run("export", "--format", "hf", "--checkpoint", cls.run_dir, "--out", cls.hf_dir)
        with open(os.path.join(cls.run_dir, "config.json")) as f:
            cls.ours = json.load(f)["model"]

    @classmethod
    def tearDownClass(cls):
        cls.scratch.__exit__(None, None, None)

    def test_logits_match_fp8train(self):
        torch.manual_seed(0)
        model, info = transformers.AutoModelForCausalLM.from_pretrained(
            self.hf_dir, dtype=torch.float32, output_loading_info=True)
        self.assertEqual(type(model).__name__, "DeepseekV3ForCausalLM")
        self.assertEqual(info["missing_keys"] if isinstance(info["missing_keys"], list) else list(info["missing_keys"]), [])
        # Only the MTP layer (index num_hidden_layers, which transformers does not run) goes unused.
        n = self.ours["n_layers"]
        for key in info["unexpected_keys"]:
            self.assertTrue(key.startswith(f"model.layers.{n}."), key)
        model.eval()
        tokens = list(TEXT.encode())
        with torch.no_grad():
            theirs = model(torch.tensor([tokens])).logits[0].double().numpy()
        path = os.path.join(self.scratch.path, "logits.f32")
        oracle.run("logits", "--checkpoint", self.run_dir, "--tokens", ",".join(map(str, tokens)), "--out", path)
        ours = np.fromfile(path, dtype="<f4").astype(np.float64).reshape(len(tokens), -1)
        self.assertEqual(ours.shape, theirs.shape)
        rel = np.abs(ours - theirs).max() / np.abs(ours).max()
        print(f"max |fp8train - transformers| / max |fp8train| = {rel:.3e} over {ours.size} logits")
        self.assertLess(rel, 1e-4)
        # The logits are not degenerate (a model of zeros would also agree).
        self.assertGreater(np.abs(ours).max(), 0.1)
        self.assertTrue((ours.argmax(1) == theirs.argmax(1)).all())

    def test_init_from_a_transformers_save(self):
        # A directory transformers itself wrote (save_pretrained drops the MTP layer it does not run) starts a run.
        model = transformers.AutoModelForCausalLM.from_pretrained(self.hf_dir, dtype=torch.float32)
        saved = os.path.join(self.scratch.path, "resaved")
        model.save_pretrained(saved)
        run = os.path.join(self.scratch.path, "from-resaved")
        p = oracle.run("train", "--init-from", saved, "--steps", "1", "--batch-size", "4", "--seq-len", "32",
                       "--final-eval-windows", "4", "--corpus-bytes", "20000", "--threads", "2", "--recipe", "fp32",
                       "--out", run)
        self.assertIn("no MTP layer weights", p.stdout)
        self.assertIn("initial weights: ", p.stdout)

    def test_config_fields(self):
        with open(os.path.join(self.hf_dir, "config.json")) as f:
            cfg = json.load(f)
        o = self.ours
        expect = {"model_type": "deepseek_v3", "hidden_size": o["hidden_size"], "num_hidden_layers": o["n_layers"],
                  "first_k_dense_replace": o["n_dense_layers"], "q_lora_rank": o["q_lora_rank"],
                  "kv_lora_rank": o["kv_lora_rank"], "qk_nope_head_dim": o["qk_nope_head_dim"],
                  "qk_rope_head_dim": o["qk_rope_head_dim"], "v_head_dim": o["v_head_dim"], "n_group": 2,
                  "topk_group": 1, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "norm_topk_prob": True,
                  "rope_interleave": True, "tie_word_embeddings": False, "num_nextn_predict_layers": 1,
                  "n_routed_experts": o["n_routed_experts"], "num_experts_per_tok": o["num_experts_per_tok"]}
        for k, v in expect.items():
            self.assertEqual(cfg[k], v, k)
        loaded = transformers.AutoConfig.from_pretrained(self.hf_dir)
        self.assertEqual(loaded.model_type, "deepseek_v3")
        self.assertEqual(loaded.first_k_dense_replace, o["n_dense_layers"])

    def test_mtp_layer_as_released(self):
        hf = load_file(os.path.join(self.hf_dir, "model.safetensors"))
        with open(os.path.join(self.run_dir, "checkpoints", "latest")) as f:
            step = f.read().strip()
        master = load_file(os.path.join(self.run_dir, "checkpoints", step, "master.safetensors"))
        n, d = self.ours["n_layers"], self.ours["hidden_size"]
        for name in ["enorm.weight", "hnorm.weight", "eh_proj.weight", "shared_head.norm.weight",
                     "shared_head.head.weight", "embed_tokens.weight", "self_attn.q_a_proj.weight",
                     "mlp.gate.e_score_correction_bias", "mlp.experts.0.gate_proj.weight"]:
            self.assertIn(f"model.layers.{n}.{name}", hf)
        # The release's eh_proj reads [enorm(embedding); hnorm(hidden)]; fp8train's [hnorm(hidden); enorm(embedding)].
        ours, theirs = master["mtp.0.eh_proj.weight"], hf[f"model.layers.{n}.eh_proj.weight"]
        np.testing.assert_array_equal(theirs[:, :d], ours[:, d:])
        np.testing.assert_array_equal(theirs[:, d:], ours[:, :d])
        np.testing.assert_array_equal(hf[f"model.layers.{n}.shared_head.norm.weight"], master["mtp.0.norm.weight"])
        np.testing.assert_array_equal(hf["model.layers.1.mlp.gate.e_score_correction_bias"],
                                      master["layers.1.moe.gate.bias"])
        self.assertGreater(np.abs(master["layers.1.moe.gate.bias"]).max(), 0)  # the biases moved in training
        # Every master tensor is exported, unchanged except the eh_proj swap.
        self.assertEqual(len(hf), len(master) + 2)  # + the MTP layer's embedding and head copies
        # The safetensors header says format "pt", which transformers requires.
        with open(os.path.join(self.hf_dir, "model.safetensors"), "rb") as f:
            header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
        self.assertEqual(header["__metadata__"]["format"], "pt")


if __name__ == "__main__":
    unittest.main(verbosity=2)
