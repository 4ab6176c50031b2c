// report.html: one self-contained page (inline SVG, no JavaScript, no external files) summarising a run,
// built from the files the trainer writes in the run directory (metrics.jsonl, eval.jsonl,
// expert_load.jsonl, events.jsonl, config.json, summary.json). Figures: train and held-out loss, loss
// components, held-out bits per byte, learning rate, gradient norm, throughput, max expert load ratio and the
// per-expert load of every MoE layer over time, and (when health was sampled) each GEMM kind's relative error
// against its FP32 reference with its run mean in the summary; then the resolved config.
#pragma once
#include <string>

namespace fp8train::train {

// Writes RUN/report.html (atomically) and returns its path.
std::string write_report(const std::string& run_dir);

}  // namespace fp8train::train
