// `fp8train tokenizer ...` and `fp8train tokenize`: the subword tokenizer and pre-tokenized token shards.
//   fp8train tokenizer train --data FILE... --vocab N --out tok.model [--model-type bpe|unigram] [--threads N]
//       [--max-sentences N]      trains a SentencePiece model (tokenizer.h) on the files' lines
//   fp8train tokenizer encode (--tokenizer tok.model | --checkpoint DIR) (--text TEXT | --file FILE) [--json]
//       prints the ids (one line, space-separated; --json: a JSON array); no tokenizer: the byte tokenizer
//   fp8train tokenizer export-hf (--tokenizer tok.model | --checkpoint DIR) --out DIR
//       writes the Hugging Face tokenizer files (tokenizer_hf.h); no tokenizer: the byte tokenizer's
//   fp8train tokenize --tokenizer tok.model --data FILE... --out DIR [--shard-tokens N]
//       writes memory-mapped token shards (token_shards.h) for `fp8train train --data DIR`
//   fp8train tokenize --verify DIR
//       checks every shard of DIR against the checksums in its index
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "common/error.h"
#include "train/atomic_file.h"
#include "train/checkpoint.h"
#include "train/dataset.h"
#include "train/token_shards.h"
#include "train/tokenizer.h"
#include "train/tokenizer_hf.h"

namespace fp8train::cli {
namespace {

using namespace fp8train::train;

struct Source {
  std::string tokenizer, checkpoint;
};

std::unique_ptr<Tokenizer> tokenizer_of(const Source& s) {
  FP8T_CHECK(s.tokenizer.empty() || s.checkpoint.empty(), "give --tokenizer or --checkpoint, not both");
  if (!s.checkpoint.empty()) {
    return checkpoint_tokenizer(read_checkpoint_meta(resolve_checkpoint_dir(s.checkpoint), CheckpointUse::Inference));
  }
  return s.tokenizer.empty() ? make_byte_tokenizer() : load_tokenizer_file(s.tokenizer);
}

struct TrainTokArgs {
  TokenizerTrainOptions o;
  std::string out;
};

void run_tokenizer_train(TrainTokArgs& a) {
  FP8T_CHECK(!a.out.empty(), "tokenizer train needs --out FILE");
  const auto t0 = std::chrono::steady_clock::now();
  const std::string model = train_sentencepiece(a.o);
  const std::unique_ptr<Tokenizer> tok = sentencepiece_tokenizer(model, "the trained model");
  write_file_atomic(a.out, model);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  uint64_t bytes = 0;
  uint64_t tokens = 0;
  for (const std::string& f : a.o.inputs) {
    const std::string text = read_file(f);
    bytes += text.size();
    tokens += encode_text(*tok, text).size();
  }
  std::printf("tokenizer: %s %s, %u ids, trained on %zu file%s (%llu bytes) in %.1f s -> %s\n", a.o.model_type.c_str(),
              tok->kind().c_str(), tok->vocab_size(), a.o.inputs.size(), a.o.inputs.size() == 1 ? "" : "s",
              static_cast<unsigned long long>(bytes), seconds, a.out.c_str());
  std::printf("the training files encode to %llu tokens: %.3f tokens per byte (%.2f bytes per token)\n",
              static_cast<unsigned long long>(tokens), static_cast<double>(tokens) / static_cast<double>(bytes),
              static_cast<double>(bytes) / static_cast<double>(tokens));
}

struct EncodeArgs {
  Source source;
  std::string text, file;
  bool text_given = false, json = false;
};

void run_encode(const EncodeArgs& a) {
  FP8T_CHECK(a.text_given != !a.file.empty(), "give exactly one of --text and --file");
  const std::unique_ptr<Tokenizer> tok = tokenizer_of(a.source);
  const std::string text = a.text_given ? a.text : read_file(a.file);
  validate_utf8(text, a.text_given ? "--text" : "'" + a.file + "'");
  const std::vector<Token> ids = encode_text(*tok, text);
  if (a.json) {
    std::printf("%s\n", nlohmann::json(ids).dump().c_str());
  } else {
    std::printf("%s\n", fmt::format("{}", fmt::join(ids, " ")).c_str());
  }
}

struct HfArgs {
  Source source;
  std::string out;
};

void run_export_hf(const HfArgs& a) {
  FP8T_CHECK(!a.out.empty(), "export-hf needs --out DIR");
  const std::unique_ptr<Tokenizer> tok = tokenizer_of(a.source);
  const std::vector<std::string> files = write_hf_tokenizer_files(*tok, a.out);
  std::printf("%s: wrote %s to %s\n", tok->describe().c_str(), fmt::format("{}", fmt::join(files, ", ")).c_str(),
              a.out.c_str());
}

struct TokenizeArgs {
  std::string tokenizer, verify;
  TokenizeOptions o;
};

void run_tokenize(const TokenizeArgs& a) {
  if (!a.verify.empty()) {
    FP8T_CHECK(a.o.inputs.empty() && a.o.out_dir.empty(), "--verify takes only the shard directory");
    verify_token_shards(a.verify);
    const TokenData d = open_token_shards(a.verify, nullptr);
    std::printf("%s: %zu tokens, every shard matches its checksum\n", d.source.c_str(), d.tokens.size());
    return;
  }
  const std::unique_ptr<Tokenizer> tok = a.tokenizer.empty() ? make_byte_tokenizer() : load_tokenizer_file(a.tokenizer);
  const TokenizeStats s = tokenize_to_shards(*tok, a.o);
  std::printf(
      "tokenize: %lld file%s, %lld bytes -> %lld tokens (%s, %.3f tokens per byte) in %lld shard%s of uint%u "
      "in %s; %.2f MB/s\n",
      static_cast<long long>(s.files), s.files == 1 ? "" : "s", static_cast<long long>(s.bytes),
      static_cast<long long>(s.tokens), tok->describe().c_str(),
      static_cast<double>(s.tokens) / static_cast<double>(s.bytes), static_cast<long long>(s.shards),
      s.shards == 1 ? "" : "s", s.bytes_per_token * 8, a.o.out_dir.c_str(),
      static_cast<double>(s.bytes) / 1e6 / std::max(s.seconds, 1e-9));
}

void add_tokenizer(CLI::App& root) {
  auto* group = root.add_subcommand("tokenizer",
                                    "Subword tokenizer: train a SentencePiece model, encode, export for Hugging Face");
  group->require_subcommand(1);

  static TrainTokArgs train_args;
  train_args.o.threads = std::max(1, omp_get_max_threads());
  auto* train = group->add_subcommand("train", "Train a SentencePiece BPE tokenizer on text files");
  train->add_option("--data", train_args.o.inputs, "UTF-8 text files (each line is a training sentence)")->required();
  train
      ->add_option("--vocab", train_args.o.vocab_size,
                   "vocabulary size (ids), including 4 specials and 256 byte pieces")
      ->required();
  train->add_option("--out", train_args.out, "model file to write (e.g. tok.model)")->required();
  train->add_option("--model-type", train_args.o.model_type, "bpe or unigram")->capture_default_str();
  train->add_option("--threads", train_args.o.threads, "training threads")->capture_default_str();
  train
      ->add_option("--max-sentences", train_args.o.max_sentences,
                   "train on a random sample of this many lines (0: all)")
      ->capture_default_str();
  train->callback([] { run_tokenizer_train(train_args); });

  static EncodeArgs enc_args;
  auto* enc = group->add_subcommand("encode", "Print the ids of a text");
  enc->add_option("--tokenizer", enc_args.source.tokenizer, "SentencePiece model (default: the byte tokenizer)");
  enc->add_option("--checkpoint", enc_args.source.checkpoint, "use the tokenizer saved in this checkpoint");
  auto* text = enc->add_option("--text", enc_args.text, "the text");
  enc->add_option("--file", enc_args.file, "a UTF-8 file to encode instead of --text");
  enc->add_flag("--json", enc_args.json, "print a JSON array");
  enc->callback([text] {
    enc_args.text_given = text->count() > 0;
    run_encode(enc_args);
  });

  static HfArgs hf_args;
  auto* hf = group->add_subcommand("export-hf", "Write Hugging Face tokenizer files (AutoTokenizer.from_pretrained)");
  hf->add_option("--tokenizer", hf_args.source.tokenizer, "SentencePiece model (default: the byte tokenizer)");
  hf->add_option("--checkpoint", hf_args.source.checkpoint, "export the tokenizer saved in this checkpoint");
  hf->add_option("--out", hf_args.out, "directory (created when missing)")->required();
  hf->callback([] { run_export_hf(hf_args); });

  static TokenizeArgs tok_args;
  auto* tokenize =
      root.add_subcommand("tokenize", "Tokenize text files into memory-mapped token shards for --data DIR");
  tokenize->add_option("--tokenizer", tok_args.tokenizer, "SentencePiece model (default: the byte tokenizer)");
  tokenize->add_option("--data", tok_args.o.inputs, "UTF-8 text files, in order");
  tokenize->add_option("--out", tok_args.o.out_dir, "shard directory to create (must not exist)");
  tokenize->add_option("--shard-tokens", tok_args.o.shard_tokens, "tokens per shard")->capture_default_str();
  tokenize->add_option("--verify", tok_args.verify, "check an existing shard directory's checksums instead");
  tokenize->callback([] {
    if (tok_args.verify.empty()) {
      FP8T_CHECK(!tok_args.o.inputs.empty(), "tokenize needs --data FILE... (or --verify DIR)");
      FP8T_CHECK(!tok_args.o.out_dir.empty(), "tokenize needs --out DIR");
    }
    run_tokenize(tok_args);
  });
}

const bool registered = register_command("tokenizer", 15, &add_tokenizer);

}  // namespace
}  // namespace fp8train::cli
