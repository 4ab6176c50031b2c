// safetensors: the tensor file format of Hugging Face (readable by PyTorch, safetensors, HF tools).
//
//   bytes 0..7     N, uint64 little-endian: length of the JSON header
//   bytes 8..8+N   UTF-8 JSON object (may be padded at the end with spaces):
//                    { "__metadata__": {"key": "value", ...},             (optional, string → string)
//                      "<tensor name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ... }
//   bytes 8+N..    the data buffer; [begin, end) are relative to its start, row-major, little-endian
//
// The writer pads the header with spaces so the buffer starts 8-byte aligned and lays tensors out by
// decreasing element size then name (every tensor stays aligned to its element size), like the reference.
// The reader is strict: header length within the file and at most 100 MB, valid JSON object, nesting
// depth at most 3, no duplicate names, known dtypes, shapes of non-negative integers, dtype × shape = byte
// count without overflow, offsets in range, tensors covering the buffer exactly (no overlap, no hole, no
// trailing bytes). Every violation throws fp8train::Error with a sentence naming the file and the problem.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace fp8train::train {

enum class StDtype : uint8_t { F64, F32, F16, BF16, I64, I32, I16, I8, U64, U32, U16, U8, BOOL, F8_E4M3, F8_E5M2 };

const char* st_dtype_name(StDtype dtype);
size_t st_dtype_size(StDtype dtype);
// Returns false when `name` is not a dtype this reader knows.
bool st_dtype_from_name(std::string_view name, StDtype* dtype);

struct StTensor {
  std::string name;
  StDtype dtype = StDtype::F32;
  std::vector<int64_t> shape;
  std::string data;  // raw little-endian bytes, element count × element size

  size_t element_count() const;
};

struct StFile {
  std::map<std::string, std::string> metadata;
  std::vector<StTensor> tensors;

  const StTensor* find(const std::string& name) const;  // nullptr if absent
  const StTensor& get(const std::string& name, const std::string& what) const;  // Error naming `what` if absent
};

// Tensor construction / conversion helpers (this host is little-endian, checked at compile time).
StTensor st_from_f32(const std::string& name, const std::vector<int64_t>& shape, const float* values);
StTensor st_from_bf16_codes(const std::string& name, const std::vector<int64_t>& shape, const uint16_t* codes);
// F32 values (F32 copied, BF16 widened exactly); other dtypes throw Error.
std::vector<float> st_to_f32(const StTensor& t);
// BF16 codes of a BF16 tensor; other dtypes throw Error.
std::vector<uint16_t> st_to_bf16_codes(const StTensor& t);

std::string encode_safetensors(const StFile& file);
// `what` names the source in errors (e.g. "'run/ckpt/model.safetensors'").
StFile decode_safetensors(std::string_view bytes, const std::string& what);

void write_safetensors(const std::string& path, const StFile& file);  // atomic (atomic_file.h)
StFile read_safetensors(const std::string& path);

}  // namespace fp8train::train
