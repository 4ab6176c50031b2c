#!/usr/bin/env python3
"""The loss-parity study's scripts (scripts/parity/): make_corpus.py applies its documented rule and is
deterministic; summarize.py computes the per-seed gaps, the baseline's seed range and the seed-averaged gap from
compare.json files, and refuses a malformed one naming the field; study.sh trains each recipe once (side by side on
--gpus G), reuses finished runs, retrains cut ones and skips compared seeds (driving a stand-in for fp8train that
logs what it is asked). Standard library only."""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAKE = os.path.join(ROOT, "scripts", "parity", "make_corpus.py")
SUMMARIZE = os.path.join(ROOT, "scripts", "parity", "summarize.py")
STUDY = os.path.join(ROOT, "scripts", "parity", "study.sh")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def run(*args):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True)


def corpus_rule(tmp):
    src = os.path.join(tmp, "src")
    os.makedirs(os.path.join(src, "pkg", "sub"))
    files = {"a.py": b"print('a')\n", "pkg/b.py": b"x = 1\n", "pkg/sub/c.py": "s = '\u00e9'\n".encode(),
             "pkg/latin1.py": b"s = '\xe9'\n", "pkg/nul.py": b"a\0b\n", "pkg/big.py": b"#" * 5000 + b"\n",
             "pkg/notes.txt": b"not python\n"}
    for rel, data in files.items():
        with open(os.path.join(src, rel), "wb") as f:
            f.write(data)
    os.symlink(os.path.join(src, "a.py"), os.path.join(src, "pkg", "link.py"))
    outs = []
    for i in range(2):
        out = os.path.join(tmp, f"corpus{i}.txt")
        r = run(MAKE, "--root", src, "--out", out, "--max-file-bytes", "4096")
        check(r.returncode == 0, f"make_corpus exits 0 ({r.stderr})")
        outs.append(out)
    with open(outs[0], "rb") as f:
        data = f.read()
    with open(outs[1], "rb") as f:
        check(f.read() == data, "make_corpus is deterministic")
    info = json.load(open(outs[0] + ".json"))
    kept = ["a.py", "pkg/b.py", "pkg/sub/c.py"]  # not: latin-1, NUL, > max bytes, .txt, the symbolic link
    order = sorted(kept, key=lambda rel: hashlib.sha256(rel.encode()).hexdigest())
    want = b"".join(files[rel] + b"\n" for rel in order)
    check(data == want, "the corpus is the kept files in sha256(path) order, each followed by a newline")
    check(info["files"] == 3 and info["bytes"] == len(want), f"file and byte counts ({info})")
    check(info["sha256"] == hashlib.sha256(want).hexdigest(), "the recorded SHA-256 is the corpus's")
    check(info["skipped"] == {"not_utf8": 1, "nul": 1}, f"skipped counts ({info['skipped']})")
    check(not os.path.exists(outs[0] + ".partial"), "no partial file is left")
    r = run(MAKE, "--root", os.path.join(tmp, "missing"), "--out", os.path.join(tmp, "x.txt"))
    check(r.returncode != 0 and "is not a directory" in (r.stderr + r.stdout), "a missing root is refused by name")


def compare_json(base_loss, other_loss, other_train_err, tenth):
    def entry(name, loss, err):
        return {"recipe": name, "steps": 100, "final_eval_loss": loss, "relative_loss_error_vs_baseline": err,
                "tokens_per_s": 1000.0, "relative_loss_error_by_tenth": tenth if name != "bf16" else [0.0] * 10,
                "gemm_relative_error": None if name == "bf16" else
                {"fprop": {"pooled": 0.02}, "dgrad": {"pooled": 0.03}, "wgrad": {"pooled": 0.04}}}
    return {"baseline": "bf16", "recipes": [entry("bf16", base_loss, 0.0),
                                            entry("fp8-deepseek", other_loss, other_train_err)]}


def summary(tmp):
    d = os.path.join(tmp, "study")
    seeds = {1: (2.00, 2.01, 0.004), 2: (2.02, 2.02, 0.002), 3: (1.98, 1.97, 0.003)}
    for s, (b, o, e) in seeds.items():
        os.makedirs(os.path.join(d, f"seed-{s}"))
        with open(os.path.join(d, f"seed-{s}", "compare.json"), "w") as f:
            json.dump(compare_json(b, o, e, [0.001] * 10), f)
    r = run(SUMMARIZE, d)
    check(r.returncode == 0, f"summarize exits 0 ({r.stderr})")
    s = json.load(open(os.path.join(d, "summary.json")))
    gaps = [(2.01 - 2.00) / 2.00, 0.0, (1.97 - 1.98) / 1.98]
    fp8 = s["recipes"]["fp8-deepseek"]
    check(abs(fp8["held_out_gap_mean"] - sum(gaps) / 3) < 1e-12, f"seed-averaged gap ({fp8['held_out_gap_mean']})")
    check(abs(fp8["held_out_gap_abs_max"] - max(abs(g) for g in gaps)) < 1e-12, "largest per-seed gap")
    check(abs(s["baseline_seed_range_rel"] - 0.04 / 2.00) < 1e-12, f"bf16 seed range ({s['baseline_seed_range_rel']})")
    check(fp8["inside_baseline_seed_range"] is True, "a gap smaller than the range is inside it")
    check(abs(fp8["train_loss_rel_error_last_10pct_mean"] - 0.003) < 1e-12, "mean training-loss error")
    check(abs(fp8["gemm_pooled_rel_error_mean"]["wgrad"] - 0.04) < 1e-12, "GEMM errors averaged over seeds")
    check(os.path.exists(os.path.join(d, "summary.md")), "summary.md is written")
    # compare.json's signed training-loss differences, where it has them, are what the summary shows and averages.
    sd = os.path.join(tmp, "signed")
    for seed, diff in ((1, -0.02), (2, 0.01)):
        os.makedirs(os.path.join(sd, f"seed-{seed}"))
        c = compare_json(2.0, 2.0 * (1 + diff), abs(diff), [abs(diff)] * 10)
        for e in c["recipes"]:
            e["relative_loss_difference_vs_baseline"] = 0.0 if e["recipe"] == "bf16" else diff
            e["relative_loss_difference_by_tenth"] = [0.0 if e["recipe"] == "bf16" else diff] * 10
        with open(os.path.join(sd, f"seed-{seed}", "compare.json"), "w") as f:
            json.dump(c, f)
    r = run(SUMMARIZE, sd)
    s2 = json.load(open(os.path.join(sd, "summary.json")))["recipes"]["fp8-deepseek"]
    md = open(os.path.join(sd, "summary.md")).read()
    check(r.returncode == 0 and abs(s2["train_loss_rel_difference_last_10pct_mean"] - (-0.005)) < 1e-12 and
          "-2.000 %" in md and "+1.00 %" in md and "signed relative difference" in md,
          f"signed training-loss differences are shown with their sign and averaged ({r.stderr})")
    # A one-recipe compare.json (a seed whose recipes are still training, under another baseline) is left out.
    os.makedirs(os.path.join(d, "seed-4"))
    with open(os.path.join(d, "seed-4", "compare.json"), "w") as f:
        json.dump({"baseline": "fp8-deepseek", "recipes": [compare_json(2.0, 2.0, 0.0, [0.0] * 10)["recipes"][1]]}, f)
    r = run(SUMMARIZE, d)
    s = json.load(open(os.path.join(d, "summary.json")))
    check(r.returncode == 0 and "seed 4" in r.stderr and s["recipes"]["fp8-deepseek"]["seeds"] == 3,
          f"a one-recipe compare.json is left out with a note ({r.stderr})")
    shutil.rmtree(os.path.join(d, "seed-4"))
    # A compare.json without a field the summary needs: refused, naming it.
    bad = compare_json(2.0, 2.0, 0.0, [0.0] * 10)
    del bad["recipes"][1]["final_eval_loss"]
    with open(os.path.join(d, "seed-2", "compare.json"), "w") as f:
        json.dump(bad, f)
    r = run(SUMMARIZE, d)
    check(r.returncode != 0 and "final_eval_loss" in r.stderr + r.stdout, "a missing field is named")
    r = run(SUMMARIZE, os.path.join(tmp, "empty"))
    check(r.returncode != 0 and "compare.json" in r.stderr + r.stdout, "a directory without seeds is refused")


# A stand-in for `fp8train compare --recipes R,... --out DIR ...`: a recipe's run is DIR/<name>; one with a
# summary.json is reused, one without is refused as unfinished (as fp8train does), a missing one is "trained" (its
# summary written, unless FAKE_CUT names the recipe: then it exits 1 mid-run). It logs "train R GPU" / "reuse R" to
# FAKE_LOG and writes DIR/compare.json for the recipes of the call.
FAKE = r"""#!/usr/bin/env python3
import json, os, sys
a = sys.argv[1:]
if a[0] == "train":  # train --resume RUN: finishes a cut run that saved a checkpoint
    assert a[1] == "--resume" and os.path.exists(os.path.join(a[2], "checkpoints", "latest")), a
    gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "-")
    open(os.environ["FAKE_LOG"], "a").write(f"resume {os.path.basename(a[2])} {gpu}\n")
    json.dump({"steps": 10}, open(os.path.join(a[2], "summary.json"), "w"))
    sys.exit(0)
assert a[0] == "compare", a
recipes = a[a.index("--recipes") + 1].split(",")
out = a[a.index("--out") + 1]
log = open(os.environ["FAKE_LOG"], "a")
for r in recipes:
    d = os.path.join(out, r.replace(":", "_").replace("=", "-"))
    if os.path.exists(os.path.join(d, "summary.json")):
        log.write(f"reuse {r}\n")
        continue
    if os.path.isdir(d):
        sys.exit(f"compare: '{d}' holds an unfinished run of {r}")
    os.makedirs(d)
    log.write(f"train {r} {os.environ.get('CUDA_VISIBLE_DEVICES', '-')}\n")
    if os.environ.get("FAKE_CUT") == r:
        if "--save-every" in a:  # cut after a checkpoint
            os.makedirs(os.path.join(d, "checkpoints"))
            open(os.path.join(d, "checkpoints", "latest"), "w").write("step-00000005")
        sys.exit(f"{r}: cut short")
    json.dump({"steps": 10}, open(os.path.join(d, "summary.json"), "w"))
entries = [{"recipe": r, "steps": 10, "final_eval_loss": 2.0 + 0.01 * i, "relative_loss_error_vs_baseline": 0.0,
            "tokens_per_s": 1.0, "relative_loss_error_by_tenth": [0.0] * 10, "gemm_relative_error": None}
           for i, r in enumerate(recipes)]
base = a[a.index("--baseline") + 1] if "--baseline" in a else recipes[0]
json.dump({"baseline": base, "recipes": entries}, open(os.path.join(out, "compare.json"), "w"))
"""


def study(tmp):
    fake = os.path.join(tmp, "fake_fp8train")
    with open(fake, "w") as f:
        f.write(FAKE)
    os.chmod(fake, 0o755)
    corpus = os.path.join(tmp, "corpus.txt")
    with open(corpus, "w") as f:
        f.write("x = 1\n")
    out, log = os.path.join(tmp, "st"), os.path.join(tmp, "calls.log")
    recipes = "fp8-deepseek:promote=never,bf16,fp8-deepseek"  # the slow one first; the baseline is bf16 anyway

    def study_run(seeds, cut=None, gpus="2", extra=()):
        open(log, "w").close()
        env = dict(os.environ, FP8TRAIN_BIN=fake, FAKE_LOG=log)
        env.pop("FAKE_CUT", None)
        env.pop("CUDA_VISIBLE_DEVICES", None)
        if cut:
            env["FAKE_CUT"] = cut
        r = subprocess.run(["bash", STUDY, "--out", out, "--steps", "10", "--seeds", seeds, "--recipes", recipes,
                            "--corpus", corpus, "--gpus", gpus, *extra], capture_output=True, text=True, env=env)
        return r, sorted(open(log).read().split("\n")[:-1])

    r, calls = study_run("1")
    check(r.returncode == 0, f"study.sh --gpus 2 exits 0 ({r.stderr[-500:]})")
    # each recipe trained once, on GPU 0 or 1 (whichever came free), then one compare of all three reusing them
    trained = sorted(c.rsplit(" ", 1)[0] for c in calls if c.startswith("train "))
    gpus_used = {c.rsplit(" ", 1)[1] for c in calls if c.startswith("train ")}
    check(trained == ["train bf16", "train fp8-deepseek", "train fp8-deepseek:promote=never"] and
          gpus_used <= {"0", "1"}, f"--gpus 2: each recipe trained once on GPU 0 or 1: {calls}")
    check([c for c in calls if c.startswith("reuse ")] ==
          ["reuse bf16", "reuse fp8-deepseek", "reuse fp8-deepseek:promote=never"], f"then all reused: {calls}")
    check(not os.path.exists(os.path.join(out, "seed-1", ".claims")), "the claims are cleaned up")
    got = sorted(e["recipe"] for e in json.load(open(os.path.join(out, "seed-1", "compare.json")))["recipes"])
    check(got == sorted(recipes.split(",")), f"the seed's compare.json holds every recipe ({got})")
    check(os.path.exists(os.path.join(out, "summary.json")), "summarize.py ran")
    check(json.load(open(os.path.join(out, "seed-1", "compare.json")))["baseline"] == "bf16",
          "bf16 is the baseline wherever it is listed")
    r, calls = study_run("1")
    check(r.returncode == 0 and calls == [] and "done already" in r.stdout, f"a compared seed is skipped ({calls})")
    # A run cut short fails the study; the next call trains it again and reuses the others.
    r, calls = study_run("2", cut="fp8-deepseek")
    check(r.returncode != 0, "a run that fails fails the study")
    r, calls = study_run("2", gpus="1")
    check(r.returncode == 0, f"the study resumes ({r.stderr[-500:]})")
    check(calls == ["reuse bf16", "reuse fp8-deepseek:promote=never", "train fp8-deepseek -"],
          f"only the cut run is trained again: {calls}")
    # A list of device ids: the recipes train on those devices only.
    r, calls = study_run("4", gpus="2,5")
    gpus_used = {c.rsplit(" ", 1)[1] for c in calls if c.startswith("train ")}
    check(r.returncode == 0 and len([c for c in calls if c.startswith("train ")]) == 3 and gpus_used <= {"2", "5"},
          f"--gpus 2,5 trains on devices 2 and 5 only: {calls}")
    # A cut run that saved a checkpoint is resumed (on a worker's GPU, or in turn on one), not trained again.
    for gpus in ("2", "1"):
        seed = "6" if gpus == "2" else "7"
        r, _ = study_run(seed, cut="bf16", gpus=gpus, extra=("--", "--save-every", "5"))
        check(r.returncode != 0, f"--gpus {gpus}: the cut run fails the study")
        r, calls = study_run(seed, gpus=gpus, extra=("--", "--save-every", "5"))
        resumed = [c for c in calls if c.startswith("resume ")]
        check(r.returncode == 0 and [c.rsplit(" ", 1)[0] for c in resumed] == ["resume bf16"] and
              not any(c.startswith("train bf16") for c in calls) and "reuse bf16" in calls and
              (gpus == "1" or resumed[0].endswith((" 0", " 1"))),
              f"--gpus {gpus}: the cut run is resumed from its checkpoint, not trained again: {calls}")
    r, _ = study_run("3", gpus="two")
    check(r.returncode != 0 and "--gpus" in r.stderr, "a bad --gpus is refused by name")


with tempfile.TemporaryDirectory() as tmp:
    corpus_rule(tmp)
    summary(tmp)
    study(tmp)
if failures:
    sys.exit(f"{len(failures)} check(s) failed")
print("parity scripts: all checks passed")
