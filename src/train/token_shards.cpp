// Token shards (token_shards.h): the writer behind `fp8train tokenize` and the memory-mapping reader.
#include "train/token_shards.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "train/atomic_file.h"

namespace fp8train::train {
namespace fs = std::filesystem;
namespace {

constexpr const char* kIndexFormat = "fp8train-token-shards";
constexpr uint64_t kFnvOffset = 14695981039346656037ull, kFnvPrime = 1099511628211ull;

uint64_t fnv1a64(std::string_view bytes, uint64_t h = kFnvOffset) {
  for (const char c : bytes) {
    h ^= static_cast<unsigned char>(c);
    h *= kFnvPrime;
  }
  return h;
}

void put_le(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

uint64_t get_le(const unsigned char* in, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(in[i]) << (8 * i);
  return v;
}

std::string shard_name(int64_t i) { return fmt::format("shard-{:05d}.bin", i); }

std::string encode_shard(const std::vector<Token>& ids, uint32_t width, uint32_t vocab, uint64_t tokenizer_hash) {
  std::string payload(ids.size() * width, '\0');
  auto* p = reinterpret_cast<unsigned char*>(payload.data());
  for (size_t i = 0; i < ids.size(); ++i)
    for (uint32_t b = 0; b < width; ++b) p[i * width + b] = static_cast<unsigned char>(ids[i] >> (8 * b));
  std::string out(kShardMagic, sizeof(kShardMagic));
  put_le(out, kShardVersion, 4);
  put_le(out, width, 4);
  put_le(out, ids.size(), 8);
  put_le(out, vocab, 4);
  put_le(out, 0, 4);
  put_le(out, tokenizer_hash, 8);
  put_le(out, fnv1a64(payload), 8);
  put_le(out, 0, 16);
  return out + payload;
}

// Reads whole lines of a file in blocks of about `block` bytes (the last block may end without a newline).
class LineBlocks {
 public:
  LineBlocks(const std::string& path, size_t block) : path_(path), in_(path, std::ios::binary), block_(block) {
    std::error_code ec;
    FP8T_CHECK(fs::exists(path, ec), "data file '{}' does not exist", path);
    FP8T_CHECK(in_.good(), "data file '{}' cannot be opened", path);
  }
  // The next block (empty at the end).
  std::string next() {
    std::string buf = std::move(carry_);
    carry_.clear();
    while (!eof_) {
      const size_t old = buf.size();
      buf.resize(old + block_);
      in_.read(buf.data() + old, static_cast<std::streamsize>(block_));
      buf.resize(old + static_cast<size_t>(in_.gcount()));
      FP8T_CHECK(!in_.bad(), "data file '{}' could not be read", path_);
      if (in_.eof()) eof_ = true;
      const size_t nl = buf.rfind('\n');
      if (nl != std::string::npos && nl >= old) {  // cut after the last newline; the rest starts the next block
        carry_.assign(buf, nl + 1);
        buf.resize(nl + 1);
        return buf;
      }
    }
    return buf;
  }

 private:
  std::string path_;
  std::ifstream in_;
  size_t block_;
  std::string carry_;
  bool eof_ = false;
};

nlohmann::json read_index(const std::string& dir) {
  const std::string path = (fs::path(dir) / "index.json").string();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::parse_error& e) {
    FP8T_FAIL("'{}' is not a token shard index: invalid JSON at byte {}", path, e.byte);
  }
  FP8T_CHECK(j.is_object() && j.value("format", "") == kIndexFormat,
             "'{}' is not a token shard index (its \"format\" is not \"{}\")", path, kIndexFormat);
  FP8T_CHECK(j.value("version", 0) == static_cast<int>(kShardVersion),
             "'{}' has token shard format version {}; this fp8train reads version {}", path, j.value("version", 0),
             kShardVersion);
  try {
    (void)j.at("tokenizer").get<std::string>();
    (void)j.at("vocab_size").get<uint32_t>();
    (void)j.at("tokens").get<uint64_t>();
    for (const auto& s : j.at("shards")) {
      (void)s.at("file").get<std::string>();
      (void)s.at("tokens").get<uint64_t>();
    }
  } catch (const nlohmann::json::exception&) {
    FP8T_FAIL("'{}' is corrupted: a field (tokenizer, vocab_size, tokens, shards) is missing or mangled", path);
  }
  return j;
}

struct Mapping {
  void* base = nullptr;
  size_t bytes = 0;
  ~Mapping() {
    if (base) ::munmap(base, bytes);
  }
};

}  // namespace

TokenizeStats tokenize_to_shards(const Tokenizer& tokenizer, const TokenizeOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  FP8T_CHECK(!o.inputs.empty(), "tokenize needs at least one --data file");
  FP8T_CHECK(!o.out_dir.empty(), "tokenize needs --out DIR");
  FP8T_CHECK(o.shard_tokens >= 1, "--shard-tokens must be at least 1, got {}", o.shard_tokens);
  std::error_code ec;
  FP8T_CHECK(!fs::exists(o.out_dir, ec), "'{}' already exists; choose a new --out directory (or remove it)", o.out_dir);
  for (const std::string& in : o.inputs) FP8T_CHECK(fs::is_regular_file(in, ec), "data file '{}' does not exist", in);
  const uint32_t vocab = tokenizer.vocab_size();
  const uint32_t width = vocab <= 65536 ? 2 : 4;
  const uint64_t tokenizer_hash = fnv1a64(tokenizer.fingerprint());

  const fs::path out(o.out_dir);
  const fs::path tmp = out.string() + ".tmp-" + std::to_string(::getpid());
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp);
  TokenizeStats stats;
  stats.bytes_per_token = width;
  try {
    nlohmann::json shards = nlohmann::json::array();
    std::vector<Token> pending;
    auto flush = [&](size_t count) {
      std::vector<Token> ids(pending.begin(), pending.begin() + static_cast<std::ptrdiff_t>(count));
      pending.erase(pending.begin(), pending.begin() + static_cast<std::ptrdiff_t>(count));
      const std::string bytes = encode_shard(ids, width, vocab, tokenizer_hash);
      const std::string name = shard_name(stats.shards++);
      write_file_atomic((tmp / name).string(), bytes);
      shards.push_back(
          {{"file", name},
           {"tokens", ids.size()},
           {"fnv1a64", fmt::format("{:016x}", fnv1a64(std::string_view(bytes).substr(kShardHeaderBytes)))}});
    };
    const size_t per_shard = static_cast<size_t>(o.shard_tokens);
    for (const std::string& path : o.inputs) {
      LineBlocks blocks(path, size_t{16} << 20);
      size_t offset = 0;
      for (std::string block = blocks.next(); !block.empty(); block = blocks.next()) {
        try {
          validate_utf8(block, "data file '" + path + "'");
        } catch (const Error&) {  // name the offset in the whole file, not in the block
          validate_utf8(read_file(path), "data file '" + path + "'");
          throw;
        }
        offset += block.size();
        const std::vector<Token> ids = encode_text(tokenizer, block);
        pending.insert(pending.end(), ids.begin(), ids.end());
        while (pending.size() >= per_shard) flush(per_shard);
      }
      FP8T_CHECK(offset > 0, "data file '{}' is empty", path);
      stats.bytes += static_cast<int64_t>(offset);
      ++stats.files;
    }
    if (!pending.empty()) flush(pending.size());
    int64_t total = 0;
    for (const auto& s : shards) total += s["tokens"].get<int64_t>();
    stats.tokens = total;
    FP8T_CHECK(total > 0, "the data files hold no tokens");
    nlohmann::ordered_json index;
    index["format"] = kIndexFormat;
    index["version"] = kShardVersion;
    index["tokenizer"] = tokenizer.fingerprint();
    index["vocab_size"] = vocab;
    index["dtype"] = width == 2 ? "uint16" : "uint32";
    index["tokens"] = total;
    index["shards"] = shards;
    index["sources"] = o.inputs;
    if (!tokenizer.is_byte()) write_file_atomic((tmp / "tokenizer.model").string(), tokenizer.model_bytes());
    write_file_atomic((tmp / "index.json").string(), index.dump(2) + "\n");
    fsync_directory(tmp.string());
    FP8T_CHECK(!fs::exists(out, ec), "'{}' appeared while tokenizing; nothing was written there", o.out_dir);
    fs::rename(tmp, out);
    fsync_directory(out.parent_path().empty() ? "." : out.parent_path().string());
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return stats;
}

bool is_token_shard_dir(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::exists(fs::path(path) / "index.json", ec);
}

std::unique_ptr<Tokenizer> token_shards_tokenizer(const std::string& dir) {
  const nlohmann::json index = read_index(dir);
  const fs::path model = fs::path(dir) / "tokenizer.model";
  std::error_code ec;
  if (index["tokenizer"].get<std::string>() == "byte") return make_byte_tokenizer();
  FP8T_CHECK(fs::exists(model, ec), "token shards '{}' lack their tokenizer.model (made with {})", dir,
             index["tokenizer"].get<std::string>());
  std::unique_ptr<Tokenizer> t = load_tokenizer_file(model.string());
  FP8T_CHECK(t->fingerprint() == index["tokenizer"].get<std::string>(),
             "token shards '{}': tokenizer.model is not the tokenizer the index names ({}), corrupt directory", dir,
             index["tokenizer"].get<std::string>());
  return t;
}

TokenData open_token_shards(const std::string& dir, const Tokenizer* expected) {
  const nlohmann::json index = read_index(dir);
  const std::string fingerprint = index["tokenizer"].get<std::string>();
  const uint32_t vocab = index["vocab_size"].get<uint32_t>();
  if (expected)
    FP8T_CHECK(
        expected->fingerprint() == fingerprint && expected->vocab_size() == vocab,
        "token shards '{}' were made with another tokenizer ({}, {} ids) than this run's ({}, {} ids); "
        "re-tokenize the data with this tokenizer or train with the shards' one (--tokenizer {}/tokenizer.model)",
        dir, fingerprint, vocab, expected->fingerprint(), expected->vocab_size(), dir);
  const uint64_t hash = fnv1a64(fingerprint);
  TokenData data;
  data.vocab_size = vocab;
  data.byte_tokens = fingerprint == "byte";
  data.source = fmt::format("token shards '{}' ({} shards)", dir, index["shards"].size());
  uint64_t total = 0;
  for (const auto& s : index["shards"]) {
    const std::string name = s["file"].get<std::string>();
    const std::string path = (fs::path(dir) / name).string();
    const uint64_t count = s["tokens"].get<uint64_t>();
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    FP8T_CHECK(fd >= 0, "token shard '{}' is missing or unreadable: {}", path, std::strerror(errno));
    struct stat st {};
    const int rc = ::fstat(fd, &st);
    const size_t size = rc == 0 ? static_cast<size_t>(st.st_size) : 0;
    auto map = std::make_shared<Mapping>();
    if (size >= kShardHeaderBytes) {
      void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
      if (p != MAP_FAILED) {
        map->base = p;
        map->bytes = size;
      }
    }
    ::close(fd);
    FP8T_CHECK(size >= kShardHeaderBytes, "token shard '{}' is truncated: {} bytes, the header alone is {}", path, size,
               kShardHeaderBytes);
    FP8T_CHECK(map->base != nullptr, "token shard '{}' could not be memory-mapped", path);
    const auto* h = static_cast<const unsigned char*>(map->base);
    FP8T_CHECK(std::memcmp(h, kShardMagic, sizeof(kShardMagic)) == 0, "'{}' is not an fp8train token shard (bad magic)",
               path);
    FP8T_CHECK(get_le(h + 8, 4) == kShardVersion, "token shard '{}' has format version {}; this fp8train reads {}",
               path, get_le(h + 8, 4), kShardVersion);
    const uint32_t width = static_cast<uint32_t>(get_le(h + 12, 4));
    FP8T_CHECK(width == 2 || width == 4, "token shard '{}' is corrupt: token width {} is not 2 or 4", path, width);
    const uint64_t header_count = get_le(h + 16, 8);
    FP8T_CHECK(get_le(h + 24, 4) == vocab && get_le(h + 32, 8) == hash,
               "token shard '{}' belongs to another tokenizer or vocabulary ({} ids) than its index '{}' ({}, {} ids)",
               path, get_le(h + 24, 4), (fs::path(dir) / "index.json").string(), fingerprint, vocab);
    FP8T_CHECK(header_count == count, "token shard '{}' holds {} tokens, its index says {}", path, header_count, count);
    const uint64_t payload = size - kShardHeaderBytes;
    FP8T_CHECK(count <= payload / width && count * width == payload,
               "token shard '{}' is truncated or has trailing data: {} tokens of {} bytes need {} bytes after the "
               "header, the file has {}",
               path, count, width, count * width, payload);
    data.tokens.append(map, h + kShardHeaderBytes, width, count);
    total += count;
  }
  FP8T_CHECK(total == index["tokens"].get<uint64_t>(),
             "token shards '{}': the shards hold {} tokens, the index says {}", dir, total,
             index["tokens"].get<uint64_t>());
  FP8T_CHECK(total > 0, "token shards '{}' hold no tokens", dir);
  data.tokens.set_limit(vocab, data.source);
  data.fingerprint = fmt::format("shards:{:016x}", fnv1a64(index["shards"].dump()));
  return data;
}

void verify_token_shards(const std::string& dir) {
  const nlohmann::json index = read_index(dir);
  open_token_shards(dir, nullptr);  // sizes and headers
  for (const auto& s : index["shards"]) {
    const std::string path = (fs::path(dir) / s["file"].get<std::string>()).string();
    const std::string bytes = read_file(path);
    FP8T_CHECK(
        fmt::format("{:016x}", fnv1a64(std::string_view(bytes).substr(kShardHeaderBytes))) == s.value("fnv1a64", ""),
        "token shard '{}' is corrupted: its ids do not match the checksum in the index", path);
  }
}

}  // namespace fp8train::train
