// safetensors: files we write parse with an independent minimal reader written here from the format's
// specification (8-byte LE header length, JSON header, raw buffer); round trip of every dtype; each strict
// validation rule refused with a clear message.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "common/error.h"
#include "train/safetensors.h"

using namespace fp8train;
using namespace fp8train::train;

namespace {

// ---- an independent reader: a tiny JSON parser for the subset safetensors headers use -----------------
struct JValue {
  enum Kind { Object, Array, String, Integer } kind = Integer;
  std::map<std::string, JValue> object;
  std::vector<JValue> array;
  std::string string;
  unsigned long long integer = 0;
};

struct MiniJson {
  const std::string& s;
  size_t i = 0;
  void ws() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r')) ++i;
  }
  void expect(char c) {
    ws();
    if (i >= s.size() || s[i] != c) throw std::runtime_error(std::string("expected ") + c);
    ++i;
  }
  std::string str() {
    expect('"');
    std::string out;
    while (s.at(i) != '"') {
      if (s[i] == '\\') {
        ++i;
        out.push_back(s.at(i) == 'n' ? '\n' : s.at(i));
      } else {
        out.push_back(s[i]);
      }
      ++i;
    }
    ++i;
    return out;
  }
  JValue value() {
    ws();
    JValue v;
    if (s.at(i) == '{') {
      v.kind = JValue::Object;
      ++i;
      ws();
      if (s.at(i) == '}') return ++i, v;
      while (true) {
        std::string k = str();
        expect(':');
        v.object[k] = value();
        ws();
        if (s.at(i) == ',') { ++i; continue; }
        expect('}');
        return v;
      }
    }
    if (s.at(i) == '[') {
      v.kind = JValue::Array;
      ++i;
      ws();
      if (s.at(i) == ']') return ++i, v;
      while (true) {
        v.array.push_back(value());
        ws();
        if (s.at(i) == ',') { ++i; continue; }
        expect(']');
        return v;
      }
    }
    if (s.at(i) == '"') {
      v.kind = JValue::String;
      v.string = str();
      return v;
    }
    v.kind = JValue::Integer;
    size_t start = i;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
    if (start == i) throw std::runtime_error("bad value");
    v.integer = std::stoull(s.substr(start, i - start));
    return v;
  }
};

struct IndependentTensor {
  std::string dtype;
  std::vector<unsigned long long> shape;
  std::string bytes;
};

std::map<std::string, IndependentTensor> independent_read(const std::string& file,
                                                          std::map<std::string, std::string>* metadata) {
  unsigned long long n = 0;
  for (int b = 7; b >= 0; --b) n = (n << 8) | static_cast<unsigned char>(file[static_cast<size_t>(b)]);
  const std::string header = file.substr(8, n);
  MiniJson parser{header};
  const JValue root = parser.value();
  const std::string buffer = file.substr(8 + n);
  std::map<std::string, IndependentTensor> out;
  for (const auto& [name, v] : root.object) {
    if (name == "__metadata__") {
      for (const auto& [k, m] : v.object) (*metadata)[k] = m.string;
      continue;
    }
    IndependentTensor t;
    t.dtype = v.object.at("dtype").string;
    for (const auto& d : v.object.at("shape").array) t.shape.push_back(d.integer);
    const auto& off = v.object.at("data_offsets").array;
    t.bytes = buffer.substr(off.at(0).integer, off.at(1).integer - off.at(0).integer);
    out[name] = t;
  }
  return out;
}

StTensor raw_tensor(const std::string& name, StDtype dtype, std::vector<int64_t> shape, unsigned seed) {
  StTensor t{name, dtype, std::move(shape), {}};
  t.data.resize(t.element_count() * st_dtype_size(dtype));
  for (size_t i = 0; i < t.data.size(); ++i) t.data[i] = static_cast<char>((i * 131 + seed * 17) & 0xFF);
  return t;
}

StFile sample_file() {
  StFile f;
  f.metadata = {{"format", "pt"}, {"step", "12"}};
  const float values[6] = {1.0f, -2.5f, 3.25f, 0.0f, 1e-8f, 65504.0f};
  f.tensors.push_back(st_from_f32("layers.0.attn.wq_a.weight", {2, 3}, values));
  const uint16_t codes[4] = {0x3F80, 0xC000, 0x0001, 0x7F80};
  f.tensors.push_back(st_from_bf16_codes("embed.weight", {4}, codes));
  f.tensors.push_back(raw_tensor("f64", StDtype::F64, {3}, 1));
  f.tensors.push_back(raw_tensor("i32", StDtype::I32, {2, 2}, 2));
  f.tensors.push_back(raw_tensor("i64", StDtype::I64, {1}, 3));
  f.tensors.push_back(raw_tensor("u8", StDtype::U8, {5}, 4));
  f.tensors.push_back(raw_tensor("fp8.e4m3", StDtype::F8_E4M3, {3, 1}, 5));
  f.tensors.push_back(raw_tensor("fp8.e5m2", StDtype::F8_E5M2, {7}, 6));
  f.tensors.push_back(raw_tensor("empty", StDtype::F32, {0, 4}, 7));
  f.tensors.push_back(raw_tensor("scalar", StDtype::F32, {}, 8));
  return f;
}

std::string with_header(const std::string& json, const std::string& data) {
  std::string out;
  const uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xFF));
  return out + json + data;
}

std::string error_of(const std::string& bytes) {
  try {
    decode_safetensors(bytes, "'f.safetensors'");
  } catch (const Error& e) {
    return e.what();
  }
  return "(parsed)";
}

}  // namespace

TEST(Safetensors, WrittenFileParsesWithAnIndependentReader) {
  const StFile f = sample_file();
  const std::string bytes = encode_safetensors(f);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u) << "data buffer should start 8-byte aligned";
  EXPECT_EQ(bytes[8], '{');
  std::map<std::string, std::string> metadata;
  const auto tensors = independent_read(bytes, &metadata);
  EXPECT_EQ(metadata, f.metadata);
  ASSERT_EQ(tensors.size(), f.tensors.size());
  for (const StTensor& t : f.tensors) {
    const IndependentTensor& got = tensors.at(t.name);
    EXPECT_EQ(got.dtype, st_dtype_name(t.dtype)) << t.name;
    ASSERT_EQ(got.shape.size(), t.shape.size()) << t.name;
    for (size_t d = 0; d < t.shape.size(); ++d) EXPECT_EQ(got.shape[d], static_cast<unsigned long long>(t.shape[d]));
    EXPECT_EQ(got.bytes, t.data) << t.name;
  }
  // The F32 tensor's bytes are the IEEE little-endian floats.
  float first;
  std::memcpy(&first, tensors.at("layers.0.attn.wq_a.weight").bytes.data() + 4, 4);
  EXPECT_EQ(first, -2.5f);
}

TEST(Safetensors, RoundTripsThroughOurReaderAndDisk) {
  const StFile f = sample_file();
  const auto path = std::filesystem::temp_directory_path() / ("fp8train-st-" + std::to_string(::getpid()) + ".safetensors");
  write_safetensors(path.string(), f);
  const StFile g = read_safetensors(path.string());
  std::filesystem::remove(path);
  EXPECT_EQ(g.metadata, f.metadata);
  ASSERT_EQ(g.tensors.size(), f.tensors.size());
  for (const StTensor& t : f.tensors) {
    const StTensor& u = g.get(t.name, "file");
    EXPECT_EQ(u.dtype, t.dtype);
    EXPECT_EQ(u.shape, t.shape);
    EXPECT_EQ(u.data, t.data);
  }
  const std::vector<float> bf = st_to_f32(g.get("embed.weight", "file"));
  EXPECT_EQ(bf[0], 1.0f);
  EXPECT_EQ(bf[1], -2.0f);
  EXPECT_THROW(st_to_f32(g.get("u8", "file")), Error);
  EXPECT_THROW(g.get("nope", "file"), Error);
}

TEST(Safetensors, WriterRefusesInconsistentTensors) {
  StFile f;
  f.tensors.push_back(raw_tensor("a", StDtype::F32, {2}, 0));
  f.tensors.push_back(raw_tensor("a", StDtype::F32, {2}, 0));
  EXPECT_THROW(encode_safetensors(f), Error);
  StFile g;
  g.tensors.push_back(raw_tensor("b", StDtype::F32, {2}, 0));
  g.tensors[0].data.pop_back();
  EXPECT_THROW(encode_safetensors(g), Error);
}

TEST(Safetensors, StrictReaderNamesEachProblem) {
  const std::string ok_json = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string data8(8, '\x01');
  EXPECT_EQ(error_of(with_header(ok_json, data8)), "(parsed)");
  EXPECT_EQ(error_of(with_header(ok_json + "    ", data8)), "(parsed)");  // space padding is allowed
  const struct {
    std::string bytes;
    std::string expected;
  } cases[] = {
      {"abc", "shorter than the 8-byte header length"},
      {with_header(ok_json, data8).substr(0, 30), "runs past the end"},
      {std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8) + ok_json, "out of bounds"},
      {with_header(ok_json, data8.substr(0, 7)), "outside the 7-byte data buffer"},
      {with_header(ok_json, data8 + "xx"), "trailing data"},
      {with_header("[1,2]", ""), "does not start with '{'"},
      {with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})", data8), "not valid JSON"},
      {with_header(R"({"a":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}})", data8), "unknown dtype"},
      {with_header(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data8), "not a non-negative integer"},
      {with_header(R"({"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", data8), "not a non-negative integer"},
      {with_header(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data8), "needs 12"},
      {with_header(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", data8), "overflows"},
      {with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", data8), "outside"},
      {with_header(R"({"a":{"dtype":"F32","shape":[2]}})", data8), "exactly the fields"},
      {with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", data8), "exactly the fields"},
      {with_header(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})",
                   data8), "overlaps"},
      {with_header(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", data8), "belong to no tensor"},
      {with_header(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                   data8), "appears twice"},
      {with_header(R"({"__metadata__":{"k":3}})", ""), "not a string"},
      {with_header(R"({"a":[[[[1]]]]})", ""), "nests deeper"},
      {with_header("{\"a\xff\":{}}", ""), "not valid JSON"},
  };
  for (const auto& c : cases) {
    const std::string msg = error_of(c.bytes);
    EXPECT_NE(msg.find(c.expected), std::string::npos) << "expected '" << c.expected << "', got: " << msg;
    EXPECT_NE(msg.find("'f.safetensors'"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
  }
}
