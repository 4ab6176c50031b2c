// Tensor: a typed, shaped, strided view of a reference-counted Storage on one device.
//   dtype  — tensor/dtype.h (F32, F64, BF16 codes, U8 FP8 codes, U16 E5M6 codes, I32, I64)
//   shape  — sizes, outermost first; strides in elements (row-major contiguous: stride[last] = 1)
//   device — where the storage lives (tensor/backend.h); data<T>() returns a pointer in that device's space
// Views (view, narrow, rows) share the storage; a Storage frees its bytes, through the allocator that booked
// them, when the last view goes away. Quantized tensors (FP8/E5M6/INT8 codes + FP32 scales + granularity) are
// quant::QTensor (quant/qtensor.h), which keeps its codes and scales in Tensors of U8 and F32.
// Ops take Tensors and check dtype, shape, strides and device (ops/*.h); this layer only manages memory and
// views. Most ops accept "matrix views": 2-D tensors whose last stride is 1 and whose row stride (ld) may be
// larger than the number of columns, so a column block (narrow(1, ...)) is passed without a copy.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "tensor/allocator.h"
#include "tensor/backend.h"
#include "tensor/device.h"
#include "tensor/dtype.h"

namespace fp8train {

using Shape = std::vector<int64_t>;

// One allocation on one device, booked under a memory category. A storage may later move into a region of a
// larger parent storage (move_into: a flat parameter arena, tensor/arena.h): its bytes are copied there, its own
// block is freed, and data() points into the parent from then on, so every Tensor of this storage — e.g. the
// weight views a layer keeps — reads and writes the parent's memory without being told.
class Storage {
 public:
  Storage(Backend& backend, size_t bytes, MemCategory category);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return backend_->device(); }
  Backend& backend() const { return *backend_; }
  MemCategory category() const { return category_; }
  // Re-books this storage's bytes under another category (used by the activation cache for what it keeps).
  // Not for a storage that lives inside a parent (its bytes are the parent's).
  void set_category(MemCategory category);

  // Copies this storage's bytes to `parent` at `byte_offset`, frees its own block and points data() there; the
  // parent then lives at least as long as this storage, and the bytes count under the parent's category. Same
  // device; the region must lie inside the parent, and a storage moves at most once.
  void move_into(const std::shared_ptr<Storage>& parent, size_t byte_offset);
  // The storage this one lives inside since move_into (null while it owns its block).
  const Storage* parent() const { return parent_.get(); }

 private:
  Backend* backend_;
  void* data_;
  size_t bytes_;
  MemCategory category_;
  std::shared_ptr<Storage> parent_;  // set by move_into; data_ then points into it and nothing is freed here
};

class Tensor {
 public:
  Tensor() = default;  // undefined: defined() is false

  static Tensor empty(Shape shape, DType dtype, MemCategory category = MemCategory::Workspace,
                      Device device = default_device());
  static Tensor zeros(Shape shape, DType dtype, MemCategory category = MemCategory::Workspace,
                      Device device = default_device());
  // Copies host values into a new contiguous tensor of dtype_of<T>().
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, Shape shape, MemCategory category = MemCategory::Workspace,
                            Device device = default_device());

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const;
  const Shape& shape() const { return shape_; }
  const std::vector<int64_t>& strides() const { return strides_; }
  int dim() const { return static_cast<int>(shape_.size()); }
  int64_t size(int d) const;    // d < 0 counts from the end
  int64_t stride(int d) const;  // d < 0 counts from the end
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  bool is_contiguous() const;
  // A 2-D view with unit column stride (what GEMM-like ops take); its row stride is ld().
  bool is_matrix() const { return dim() == 2 && (shape_[1] <= 1 || strides_[1] == 1); }
  int64_t ld() const { return dim() == 2 ? strides_[0] : 0; }

  Storage& storage() const;
  const std::shared_ptr<Storage>& storage_ptr() const { return storage_; }
  MemCategory category() const { return storage().category(); }

  // Typed pointer to the first element (device address space). Throws when T does not match dtype().
  template <class T>
  T* data() const {
    FP8T_CHECK(defined(), "data() on an undefined tensor");
    FP8T_CHECK(dtype_of<T>() == dtype_, "tensor holds {} but was read as {}", dtype_name(dtype_),
               dtype_name(dtype_of<T>()));
    return static_cast<T*>(raw());
  }
  void* raw() const;  // untyped pointer to the first element

  // Same elements, new shape (one size may be -1); the tensor must be contiguous.
  Tensor view(Shape shape) const;
  // Elements [start, start + length) along dimension d (a view).
  Tensor narrow(int d, int64_t start, int64_t length) const;
  Tensor rows(int64_t begin, int64_t end) const { return narrow(0, begin, end - begin); }
  // Any view of the same storage: new sizes and strides (elements), starting `offset` elements after this view's
  // first element; checked to stay inside the storage. E.g. [rows, heads, d] with stride(0) = heads·stride(1)
  // seen as the matrix [rows·heads, d].
  Tensor as_strided(Shape shape, std::vector<int64_t> strides, int64_t offset = 0) const;
  Tensor cols(int64_t begin, int64_t end) const { return narrow(1, begin, end - begin); }

  // A contiguous copy on the same device (strided sources: CPU only here; use ops::copy on other devices).
  Tensor clone(MemCategory category = MemCategory::Workspace) const;
  // A contiguous copy on another device.
  Tensor to(Device device, MemCategory category = MemCategory::Workspace) const;
  // The elements in row-major order, copied to the host.
  template <class T>
  std::vector<T> to_vector() const;
  // Overwrites every element of a contiguous tensor with zero bits.
  void zero_();
  // Copies a contiguous tensor of the same dtype and element count into this contiguous tensor (any devices).
  void copy_from(const Tensor& src);

  // "f32[4, 8] cpu" (plus strides when not contiguous).
  std::string str() const;

 private:
  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;  // in elements
  Shape shape_;
  std::vector<int64_t> strides_;
  DType dtype_ = DType::F32;
};

std::vector<int64_t> contiguous_strides(const Shape& shape);
std::string shape_str(const Shape& shape);

}  // namespace fp8train
