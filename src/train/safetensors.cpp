// safetensors writer and strict reader (format and rules in safetensors.h).
#include "train/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "common/error.h"
#include "train/atomic_file.h"

namespace fp8train::train {

static_assert(std::endian::native == std::endian::little, "safetensors raw data is copied as little-endian");

namespace {

struct DtypeInfo {
  StDtype dtype;
  const char* name;
  size_t size;
};
constexpr DtypeInfo kDtypes[] = {
    {StDtype::F64, "F64", 8},   {StDtype::F32, "F32", 4},         {StDtype::F16, "F16", 2},
    {StDtype::BF16, "BF16", 2}, {StDtype::I64, "I64", 8},         {StDtype::I32, "I32", 4},
    {StDtype::I16, "I16", 2},   {StDtype::I8, "I8", 1},           {StDtype::U64, "U64", 8},
    {StDtype::U32, "U32", 4},   {StDtype::U16, "U16", 2},         {StDtype::U8, "U8", 1},
    {StDtype::BOOL, "BOOL", 1}, {StDtype::F8_E4M3, "F8_E4M3", 1}, {StDtype::F8_E5M2, "F8_E5M2", 1},
};

constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // the reference implementation's limit
constexpr int kMaxJsonDepth = 3;                  // root object → tensor object → shape / offsets array

// Rejects deeper nesting before the JSON parser sees it (bounded work and stack on hostile input).
int json_nesting_depth(std::string_view text) {
  int depth = 0, max_depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      max_depth = std::max(max_depth, ++depth);
      if (max_depth > kMaxJsonDepth) return max_depth;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return max_depth;
}

// a * b with overflow detection.
bool mul_overflows(uint64_t a, uint64_t b, uint64_t* out) { return __builtin_mul_overflow(a, b, out); }

}  // namespace

const char* st_dtype_name(StDtype dtype) {
  for (const auto& d : kDtypes)
    if (d.dtype == dtype) return d.name;
  return "?";
}

size_t st_dtype_size(StDtype dtype) {
  for (const auto& d : kDtypes)
    if (d.dtype == dtype) return d.size;
  return 0;
}

bool st_dtype_from_name(std::string_view name, StDtype* dtype) {
  for (const auto& d : kDtypes)
    if (name == d.name) {
      *dtype = d.dtype;
      return true;
    }
  return false;
}

size_t StTensor::element_count() const {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

const StTensor* StFile::find(const std::string& name) const {
  for (const StTensor& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

const StTensor& StFile::get(const std::string& name, const std::string& what) const {
  const StTensor* t = find(name);
  FP8T_CHECK(t != nullptr, "{} has no tensor named '{}'", what, name);
  return *t;
}

StTensor st_from_f32(const std::string& name, const std::vector<int64_t>& shape, const float* values) {
  StTensor t{name, StDtype::F32, shape, {}};
  t.data.assign(reinterpret_cast<const char*>(values), t.element_count() * 4);
  return t;
}

StTensor st_from_bf16_codes(const std::string& name, const std::vector<int64_t>& shape, const uint16_t* codes) {
  StTensor t{name, StDtype::BF16, shape, {}};
  t.data.assign(reinterpret_cast<const char*>(codes), t.element_count() * 2);
  return t;
}

std::vector<float> st_to_f32(const StTensor& t) {
  const size_t n = t.element_count();
  std::vector<float> out(n);
  if (t.dtype == StDtype::F32) {
    std::memcpy(out.data(), t.data.data(), n * 4);
  } else if (t.dtype == StDtype::BF16) {
    for (size_t i = 0; i < n; ++i) {
      uint16_t code;
      std::memcpy(&code, t.data.data() + 2 * i, 2);
      const uint32_t bits = static_cast<uint32_t>(code) << 16;
      std::memcpy(&out[i], &bits, 4);
    }
  } else {
    FP8T_FAIL("tensor '{}' is {}, expected F32 or BF16", t.name, st_dtype_name(t.dtype));
  }
  return out;
}

std::vector<uint16_t> st_to_bf16_codes(const StTensor& t) {
  FP8T_CHECK(t.dtype == StDtype::BF16, "tensor '{}' is {}, expected BF16", t.name, st_dtype_name(t.dtype));
  std::vector<uint16_t> out(t.element_count());
  std::memcpy(out.data(), t.data.data(), out.size() * 2);
  return out;
}

std::string encode_safetensors(const StFile& file) {
  std::vector<const StTensor*> order;
  std::set<std::string> names;
  for (const StTensor& t : file.tensors) {
    FP8T_CHECK(t.name != "__metadata__", "a tensor may not be named '__metadata__'");
    FP8T_CHECK(names.insert(t.name).second, "tensor name '{}' appears twice", t.name);
    for (int64_t d : t.shape) FP8T_CHECK(d >= 0, "tensor '{}' has a negative dimension {}", t.name, d);
    FP8T_CHECK(t.data.size() == t.element_count() * st_dtype_size(t.dtype),
               "tensor '{}' holds {} bytes, its dtype {} and shape need {}", t.name, t.data.size(),
               st_dtype_name(t.dtype), t.element_count() * st_dtype_size(t.dtype));
    order.push_back(&t);
  }
  std::stable_sort(order.begin(), order.end(), [](const StTensor* a, const StTensor* b) {
    const size_t sa = st_dtype_size(a->dtype), sb = st_dtype_size(b->dtype);
    return sa != sb ? sa > sb : a->name < b->name;
  });
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!file.metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : file.metadata) meta[k] = v;
    header["__metadata__"] = std::move(meta);
  }
  uint64_t offset = 0;
  for (const StTensor* t : order) {
    nlohmann::ordered_json entry;
    entry["dtype"] = st_dtype_name(t->dtype);
    entry["shape"] = t->shape;
    entry["data_offsets"] = {offset, offset + t->data.size()};
    header[t->name] = std::move(entry);
    offset += t->data.size();
  }
  std::string json = header.dump();
  while ((8 + json.size()) % 8 != 0) json.push_back(' ');
  std::string out;
  out.reserve(8 + json.size() + offset);
  const uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xFF));
  out += json;
  for (const StTensor* t : order) out += t->data;
  return out;
}

StFile decode_safetensors(std::string_view bytes, const std::string& what) {
  FP8T_CHECK(bytes.size() >= 8, "{} is not a safetensors file: {} bytes, shorter than the 8-byte header length",
             what, bytes.size());
  uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i) header_len |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  FP8T_CHECK(header_len >= 2 && header_len <= kMaxHeaderBytes,
             "{}: header length {} is out of bounds (2 to {} bytes): not a safetensors file, or corrupted", what,
             header_len, kMaxHeaderBytes);
  FP8T_CHECK(header_len <= bytes.size() - 8, "{}: header length {} runs past the end of the {}-byte file (truncated?)",
             what, header_len, bytes.size());
  const std::string_view header_text = bytes.substr(8, header_len);
  FP8T_CHECK(header_text.front() == '{', "{}: the header does not start with '{{'", what);
  FP8T_CHECK(json_nesting_depth(header_text) <= kMaxJsonDepth, "{}: the header JSON nests deeper than {} levels",
             what, kMaxJsonDepth);

  std::set<std::string> top_keys;
  std::string duplicate;
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(
        header_text.begin(), header_text.end(),
        [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
          if (event == nlohmann::json::parse_event_t::key && depth == 1 && parsed.is_string() &&
              !top_keys.insert(parsed.get<std::string>()).second && duplicate.empty())
            duplicate = parsed.get<std::string>();
          return true;
        });
  } catch (const nlohmann::json::exception& e) {
    FP8T_FAIL("{}: the header is not valid JSON ({})", what, e.what());
  }
  FP8T_CHECK(duplicate.empty(), "{}: tensor '{}' appears twice in the header", what, duplicate);
  FP8T_CHECK(header.is_object(), "{}: the header is not a JSON object", what);

  const uint64_t buffer_size = bytes.size() - 8 - header_len;
  const std::string_view buffer = bytes.substr(8 + header_len);
  StFile file;
  struct Span {
    uint64_t begin, end;
    size_t index;
  };
  std::vector<Span> spans;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    if (name == "__metadata__") {
      FP8T_CHECK(v.is_object(), "{}: __metadata__ is not an object", what);
      for (auto m = v.begin(); m != v.end(); ++m) {
        FP8T_CHECK(m.value().is_string(), "{}: metadata value of '{}' is not a string", what, m.key());
        file.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    FP8T_CHECK(v.is_object(), "{}: entry '{}' is not an object", what, name);
    FP8T_CHECK(v.size() == 3 && v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"),
               "{}: tensor '{}' must have exactly the fields dtype, shape and data_offsets", what, name);
    const nlohmann::json& dtype = v["dtype"];
    const nlohmann::json& shape = v["shape"];
    const nlohmann::json& offsets = v["data_offsets"];
    StTensor t;
    t.name = name;
    FP8T_CHECK(dtype.is_string() && st_dtype_from_name(dtype.get_ref<const std::string&>(), &t.dtype),
               "{}: tensor '{}' has an unknown dtype {}", what, name, dtype.dump());
    FP8T_CHECK(shape.is_array(), "{}: tensor '{}' has a shape that is not an array", what, name);
    uint64_t elements = 1;
    for (const auto& d : shape) {
      FP8T_CHECK(d.is_number_unsigned(), "{}: tensor '{}' has a shape entry {} that is not a non-negative integer",
                 what, name, d.dump());
      const uint64_t dim = d.get<uint64_t>();
      FP8T_CHECK(dim <= static_cast<uint64_t>(INT64_MAX) && !mul_overflows(elements, dim, &elements),
                 "{}: tensor '{}' has a shape whose element count overflows", what, name);
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    uint64_t byte_count = 0;
    FP8T_CHECK(!mul_overflows(elements, st_dtype_size(t.dtype), &byte_count),
               "{}: tensor '{}' has a byte count that overflows", what, name);
    FP8T_CHECK(offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() &&
                   offsets[1].is_number_unsigned(),
               "{}: tensor '{}' must have data_offsets [begin, end] of non-negative integers", what, name);
    const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
    FP8T_CHECK(begin <= end && end <= buffer_size,
               "{}: tensor '{}' has data_offsets [{}, {}] outside the {}-byte data buffer (truncated?)", what, name,
               begin, end, buffer_size);
    FP8T_CHECK(end - begin == byte_count,
               "{}: tensor '{}' spans {} bytes but dtype {} with shape {} needs {}", what, name, end - begin,
               st_dtype_name(t.dtype), shape.dump(), byte_count);
    spans.push_back({begin, end, file.tensors.size()});
    file.tensors.push_back(std::move(t));
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  for (const Span& s : spans) {
    FP8T_CHECK(s.begin >= covered, "{}: tensor '{}' overlaps the previous tensor's data", what,
               file.tensors[s.index].name);
    FP8T_CHECK(s.begin == covered, "{}: {} bytes of the data buffer before tensor '{}' belong to no tensor", what,
               s.begin - covered, file.tensors[s.index].name);
    covered = s.end;
    file.tensors[s.index].data.assign(buffer.substr(s.begin, s.end - s.begin));
  }
  FP8T_CHECK(covered == buffer_size, "{}: {} bytes after the last tensor belong to no tensor (trailing data)", what,
             buffer_size - covered);
  return file;
}

void write_safetensors(const std::string& path, const StFile& file) {
  write_file_atomic(path, encode_safetensors(file));
}

StFile read_safetensors(const std::string& path) { return decode_safetensors(read_file(path), "'" + path + "'"); }

}  // namespace fp8train::train
