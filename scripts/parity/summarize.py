#!/usr/bin/env python3
"""Summarizes a loss-parity study directory (study.sh): reads DIR/seed-*/compare.json (one `fp8train compare`
per seed, every recipe of a seed from the same initial weights and batches) and writes DIR/summary.json and
DIR/summary.md:
  - per seed and recipe: the final held-out loss (the whole held-out split), its signed relative difference
    from the same seed's baseline, the training-loss relative error over the last 10 % of steps (compare's own
    measure), tokens/s;
  - the noise floor: the baseline's held-out loss over the seeds (range / mean);
  - per recipe: the seed-averaged held-out gap (mean over seeds of the signed per-seed difference) and whether it
    lies inside the baseline's seed-to-seed range;
  - the training-loss error by tenth of the run (its evolution with tokens) and the per-GEMM-kind errors of the
    numerics-health samples, averaged over seeds.
Exits non-zero naming the problem when a compare.json is missing a field or the seeds disagree on the baseline. A
compare.json of one recipe (a seed study.sh --gpus is still training) is left out, with a note."""
import glob
import json
import math
import os
import statistics
import sys


def load(dirname):
    groups = {}
    for path in sorted(glob.glob(os.path.join(dirname, "seed-*", "compare.json"))):
        seed = os.path.basename(os.path.dirname(path))[len("seed-"):]
        with open(path) as f:
            group = json.load(f)
        # One recipe compared with itself is no comparison: study.sh --gpus writes such a file while a seed's recipes
        # are still training (one `compare` per recipe), which another study sharing DIR may be summarizing.
        if len(group.get("recipes", [])) < 2:
            print(f"summarize: seed {seed}: compare.json holds one recipe (a seed still training?), left out",
                  file=sys.stderr)
            continue
        groups[seed] = group
    if not groups:
        sys.exit(f"summarize: no seed-*/compare.json under '{dirname}'")
    baselines = {g["baseline"] for g in groups.values()}
    if len(baselines) != 1:
        sys.exit(f"summarize: the seeds have different baselines: {sorted(baselines)}")
    return groups, baselines.pop()


def pct(x, digits=3):
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.{digits}f} %"


def spct(x, digits=3):  # signed: "+0.300 %", "-2.551 %"
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return ("+" if x >= 0 else "-") + pct(abs(x), digits)


def train_cell(difference, error):  # the signed training-loss difference where compare.json has it, else the error
    return spct(difference) if difference is not None else pct(error)


def gemm_kinds(entry):
    """{kind: pooled relative error} from a recipe's gemm_relative_error (None when no health sample)."""
    g = entry.get("gemm_relative_error")
    if not isinstance(g, dict):
        return {}
    out = {}
    for kind, v in g.items():
        if isinstance(v, dict) and isinstance(v.get("pooled"), (int, float)):
            out[kind] = float(v["pooled"])
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: summarize.py STUDY_DIR")
    d = sys.argv[1]
    groups, base = load(d)
    rows, per_recipe = [], {}
    for seed, g in groups.items():
        by = {r["recipe"]: r for r in g["recipes"]}
        if base not in by:
            sys.exit(f"summarize: seed {seed} has no run of the baseline '{base}'")
        b = by[base]["final_eval_loss"]
        for name, r in by.items():
            for key in ("final_eval_loss", "relative_loss_error_vs_baseline", "tokens_per_s", "steps"):
                if key not in r:
                    sys.exit(f"summarize: seed {seed}, recipe {name}: compare.json lacks '{key}'")
            gap = (r["final_eval_loss"] - b) / b
            # compare.json's training-loss figures: signed where it has them (negative: below the baseline), else
            # the older unsigned errors
            signed = "relative_loss_difference_vs_baseline" in r
            rows.append({"seed": seed, "recipe": name, "steps": r["steps"], "held_out_loss": r["final_eval_loss"],
                         "held_out_gap_vs_baseline": gap, "train_loss_rel_error_last_10pct":
                         r["relative_loss_error_vs_baseline"], "train_loss_rel_difference_last_10pct":
                         r.get("relative_loss_difference_vs_baseline"), "tokens_per_s": r["tokens_per_s"],
                         "signed": signed, "by_tenth": r.get("relative_loss_difference_by_tenth" if signed else
                                                             "relative_loss_error_by_tenth"), "gemm": gemm_kinds(r)})
            per_recipe.setdefault(name, []).append(rows[-1])

    base_losses = [r["held_out_loss"] for r in per_recipe[base]]
    base_mean = statistics.mean(base_losses)
    spread = (max(base_losses) - min(base_losses)) / base_mean if len(base_losses) > 1 else None
    summary = {"baseline": base, "seeds": list(groups), "rows": rows,
               "baseline_held_out_losses": base_losses,
               "baseline_seed_range_rel": spread, "recipes": {}}
    for name, rs in per_recipe.items():
        if name == base:
            continue
        gaps = [r["held_out_gap_vs_baseline"] for r in rs]
        mean_gap = statistics.mean(gaps)
        kinds = {}
        for r in rs:
            for k, v in r["gemm"].items():
                kinds.setdefault(k, []).append(v)
        summary["recipes"][name] = {
            "seeds": len(rs),
            "held_out_gap_mean": mean_gap,
            "held_out_gap_abs_max": max(abs(x) for x in gaps),
            "train_loss_rel_error_last_10pct_mean": statistics.mean(r["train_loss_rel_error_last_10pct"] for r in rs),
            "train_loss_rel_difference_last_10pct_mean":
                statistics.mean(r["train_loss_rel_difference_last_10pct"] for r in rs)
                if all(r["signed"] for r in rs) else None,
            "inside_baseline_seed_range": None if spread is None or len(rs) < 2 else abs(mean_gap) <= spread,
            "gemm_pooled_rel_error_mean": {k: statistics.mean(v) for k, v in kinds.items()},
        }
    with open(os.path.join(d, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
        f.write("\n")

    md = []
    corpus = os.path.join(d, "corpus.txt.json")
    if os.path.exists(corpus):
        c = json.load(open(corpus))
        md.append(f"Corpus: {c['files']} files, {c['bytes']} bytes, SHA-256 `{c['sha256']}`.\n")
    md.append(f"Baseline: {base}. Held-out loss = the whole held-out split after the last step (nats per byte).\n")
    md.append("| seed | recipe | steps | held-out loss | vs baseline (same seed) | train loss vs baseline, last 10 % "
              "(signed where compare.json has it) | tokens/s |")
    md.append("|---|---|---|---|---|---|---|")
    for r in rows:
        md.append(f"| {r['seed']} | {r['recipe']} | {int(r['steps'])} | {r['held_out_loss']:.5f} | "
                  f"{spct(r['held_out_gap_vs_baseline'])} | "
                  f"{train_cell(r['train_loss_rel_difference_last_10pct'], r['train_loss_rel_error_last_10pct'])} | "
                  f"{r['tokens_per_s']:.0f} |")
    md.append("")
    md.append(f"{base} seed-to-seed range of the held-out loss: {pct(spread)} of its mean "
              f"({', '.join(f'{x:.5f}' for x in base_losses)}).\n")
    md.append("| recipe | seeds | seed-averaged held-out gap | largest per-seed gap | train loss, last 10 % (mean) | "
              "inside the baseline's seed range | pooled GEMM errors (mean over seeds) |")
    md.append("|---|---|---|---|---|---|---|")
    for name, s in summary["recipes"].items():
        inside = {None: "—", True: "yes", False: "no"}[s["inside_baseline_seed_range"]]
        gemm = ", ".join(f"{k} {pct(v, 2)}" for k, v in s["gemm_pooled_rel_error_mean"].items()) or "—"
        train = train_cell(s["train_loss_rel_difference_last_10pct_mean"], s["train_loss_rel_error_last_10pct_mean"])
        md.append(f"| {name} | {s['seeds']} | {pct(s['held_out_gap_mean'])} | {pct(s['held_out_gap_abs_max'])} | "
                  f"{train} | {inside} | {gemm} |")
    md.append("")
    signed_all = all(r["signed"] for r in rows)
    md.append("Training loss against the baseline by tenth of the run: " +
              ("the signed relative difference, negative below the baseline (compare.json's "
               "relative_loss_difference_by_tenth):\n" if signed_all else
               "the unsigned relative error (compare.json's relative_loss_error_by_tenth):\n"))
    md.append("| seed | recipe | " + " | ".join(f"{10 * (i + 1)} %" for i in range(10)) + " |")
    md.append("|---|---|" + "---|" * 10)
    for r in rows:
        if r["recipe"] == base or not r["by_tenth"]:
            continue
        show = spct if signed_all else pct
        md.append(f"| {r['seed']} | {r['recipe']} | " + " | ".join(show(x, 2) for x in r["by_tenth"]) + " |")
    with open(os.path.join(d, "summary.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
