// `fp8train export | logits`: a checkpoint for other tools.
//   fp8train export --format hf --checkpoint DIR --out HFDIR
//       A Hugging Face directory that transformers loads with AutoModelForCausalLM (src/train/hf_format.h).
//   fp8train logits --checkpoint DIR --tokens 1,2,3 [--out FILE] [--recipe fp32]
//       The model's next-token logits at every position of one sequence (FP32, [tokens, vocab] row-major) as raw
//       little-endian float32 in FILE, or as a JSON array of rows on stdout; computed in the fp32 recipe unless
//       --recipe says otherwise. The reference the Hugging Face oracle test compares transformers' logits with.
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "common/error.h"
#include "train/atomic_file.h"
#include "train/checkpoint.h"
#include "train/config.h"
#include "train/hf_format.h"
#include "train/model_adapter.h"

namespace fp8train::cli {
namespace {

using namespace fp8train::train;

struct ExportArgs {
  std::string format = "hf", checkpoint, out;
  bool ema = false;
};

void run_export(const ExportArgs& a) {
  FP8T_CHECK(a.format == "hf", "export: unknown --format '{}' (known: hf)", a.format);
  std::printf("%s\n", export_hf(a.checkpoint, a.out, a.ema).c_str());
}

struct LogitsArgs {
  std::string checkpoint, tokens, out, recipe = "fp32";
};

std::vector<Token> parse_tokens(const std::string& text, int64_t vocab) {
  std::vector<Token> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = text.find(',', pos);
    const std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    FP8T_CHECK(used == item.size() && !item.empty(), "--tokens: '{}' is not a token id", item);
    FP8T_CHECK(v >= 0 && v < vocab, "--tokens: {} is outside the vocabulary [0, {})", v, vocab);
    out.push_back(static_cast<Token>(v));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

void run_logits(const LogitsArgs& a) {
  const CheckpointMeta meta = read_checkpoint_meta(resolve_checkpoint_dir(a.checkpoint), CheckpointUse::Inference);
  TrainConfig config = preset_config(meta.config.value("preset", "small"));
  apply_config_json(config, meta.config, "checkpoint", nullptr);
  config.recipe = a.recipe;
  validate_config(config);
  start_device("cpu");
  DeepSeekTrainable model(config.model, 0, config.recipe);
  load_checkpoint(meta, model, nullptr);
  const std::vector<Token> tokens = parse_tokens(a.tokens, model.vocab_size());
  const size_t vocab = static_cast<size_t>(model.vocab_size());
  // Causal attention: the logits at position t are those of the prefix ending at t.
  std::vector<float> all;
  for (size_t t = 1; t <= tokens.size(); ++t) {
    const std::vector<float> row = model.next_token_logits(tokens.data(), 1, static_cast<int64_t>(t));
    FP8T_CHECK(row.size() == vocab, "logits: {} values for a vocabulary of {}", row.size(), vocab);
    all.insert(all.end(), row.begin(), row.end());
  }
  if (!a.out.empty()) {
    write_file_atomic(a.out, std::string_view(reinterpret_cast<const char*>(all.data()), all.size() * sizeof(float)));
    std::printf("logits [%zu, %zu] (float32) -> %s\n", tokens.size(), vocab, a.out.c_str());
    return;
  }
  nlohmann::json rows = nlohmann::json::array();
  for (size_t t = 0; t < tokens.size(); ++t)
    rows.push_back(std::vector<float>(all.begin() + static_cast<std::ptrdiff_t>(t * vocab),
                                      all.begin() + static_cast<std::ptrdiff_t>((t + 1) * vocab)));
  std::printf("%s\n", rows.dump().c_str());
}

void add_export(CLI::App& root) {
  static ExportArgs ex;
  auto* e = root.add_subcommand("export", "Export a checkpoint for other tools (--format hf: a transformers model)");
  e->option_defaults()->always_capture_default();
  e->add_option("--format", ex.format, "hf: a directory AutoModelForCausalLM loads (DeepseekV3ForCausalLM)");
  e->add_option("--checkpoint", ex.checkpoint, "run directory, checkpoints/ folder or step directory")->required();
  e->add_option("--out", ex.out, "directory to create (must not exist)")->required();
  e->add_flag("--ema", ex.ema, "export the weight EMA kept by --ema-decay instead of the trained weights");
  e->callback([] { run_export(ex); });

  static LogitsArgs lg;
  auto* l = root.add_subcommand("logits", "Next-token logits of a checkpoint at every position of a token sequence");
  l->option_defaults()->always_capture_default();
  l->add_option("--checkpoint", lg.checkpoint, "run directory, checkpoints/ folder or step directory")->required();
  l->add_option("--tokens", lg.tokens, "comma-separated token ids, e.g. 72,101,108")->required();
  l->add_option("--out", lg.out, "raw float32 [tokens, vocab] file (default: JSON rows on stdout)");
  l->add_option("--recipe", lg.recipe, "precision recipe of the forward pass");
  l->callback([] { run_logits(lg); });
}

const bool registered = register_command("export", 60, &add_export);

}  // namespace
}  // namespace fp8train::cli
