// Tensor and Storage (see tensor.h).
#include "tensor/tensor.h"

#include <cstring>

namespace fp8train {

std::vector<int64_t> contiguous_strides(const Shape& shape) {
  std::vector<int64_t> s(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    acc *= shape[i];
  }
  return s;
}

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

Storage::Storage(Backend& backend, size_t bytes, MemCategory category)
    : backend_(&backend), data_(backend.allocator().allocate(bytes, category)), bytes_(bytes), category_(category) {}

Storage::~Storage() {
  if (!parent_) backend_->allocator().deallocate(data_, bytes_, category_);
}

void Storage::set_category(MemCategory category) {
  if (category == category_) return;
  FP8T_CHECK(!parent_, "set_category: this storage lives inside a parent storage, whose category it shares");
  backend_->allocator().move_bytes(data_, bytes_, category_, category);
  category_ = category;
}

void Storage::move_into(const std::shared_ptr<Storage>& parent, size_t byte_offset) {
  FP8T_CHECK(parent != nullptr && parent.get() != this, "move_into: no parent storage");
  FP8T_CHECK(!parent_, "move_into: this storage already lives inside a parent");
  FP8T_CHECK(parent->device() == device(), "move_into: a {} storage cannot move into a {} parent", device().str(),
             parent->device().str());
  FP8T_CHECK(byte_offset <= parent->bytes() && bytes_ <= parent->bytes() - byte_offset,
             "move_into: {} bytes at offset {} leave the parent's {} bytes", bytes_, byte_offset, parent->bytes());
  void* target = static_cast<char*>(parent->data()) + byte_offset;
  backend_->copy(target, device(), data_, device(), bytes_);
  backend_->allocator().deallocate(data_, bytes_, category_);
  data_ = target;
  category_ = parent->category();
  parent_ = parent;
}

Tensor Tensor::empty(Shape shape, DType dtype, MemCategory category, Device device) {
  int64_t n = 1;
  for (int64_t s : shape) {
    FP8T_CHECK(s >= 0, "tensor size {} in shape {} is negative", s, shape_str(shape));
    n *= s;
  }
  Tensor t;
  t.storage_ = std::make_shared<Storage>(backend(device), static_cast<size_t>(n) * dtype_size(dtype), category);
  t.strides_ = contiguous_strides(shape);
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::zeros(Shape shape, DType dtype, MemCategory category, Device device) {
  Tensor t = empty(std::move(shape), dtype, category, device);
  t.zero_();
  return t;
}

template <class T>
Tensor Tensor::from_vector(const std::vector<T>& values, Shape shape, MemCategory category, Device device) {
  Tensor t = empty(std::move(shape), dtype_of<T>(), category, device);
  FP8T_CHECK(static_cast<int64_t>(values.size()) == t.numel(), "from_vector: {} values for shape {}", values.size(),
             shape_str(t.shape()));
  t.storage().backend().copy(t.raw(), device, values.data(), Device::cpu(), t.nbytes());
  return t;
}

Device Tensor::device() const { return storage().device(); }

Storage& Tensor::storage() const {
  FP8T_CHECK(defined(), "use of an undefined tensor");
  return *storage_;
}

int64_t Tensor::size(int d) const {
  const int n = dim();
  const int i = d < 0 ? d + n : d;
  FP8T_CHECK(i >= 0 && i < n, "dimension {} out of range for a {}-d tensor", d, n);
  return shape_[i];
}

int64_t Tensor::stride(int d) const {
  const int n = dim();
  const int i = d < 0 ? d + n : d;
  FP8T_CHECK(i >= 0 && i < n, "dimension {} out of range for a {}-d tensor", d, n);
  return strides_[i];
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t s : shape_) n *= s;
  return n;
}

bool Tensor::is_contiguous() const {
  int64_t acc = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] != 1 && strides_[i] != acc) return false;
    acc *= shape_[i];
  }
  return true;
}

void* Tensor::raw() const {
  return static_cast<char*>(storage().data()) + offset_ * static_cast<int64_t>(dtype_size(dtype_));
}

Tensor Tensor::view(Shape shape) const {
  FP8T_CHECK(is_contiguous(), "view{} of a non-contiguous tensor {}", shape_str(shape), str());
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      FP8T_CHECK(infer < 0, "view{}: more than one -1", shape_str(shape));
      infer = static_cast<int>(i);
    } else {
      FP8T_CHECK(shape[i] >= 0, "view{}: negative size", shape_str(shape));
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    FP8T_CHECK(known > 0 && numel() % known == 0, "view{} does not divide {} elements", shape_str(shape), numel());
    shape[infer] = numel() / known;
    known *= shape[infer];
  }
  FP8T_CHECK(known == numel(), "view{} has {} elements but the tensor {} has {}", shape_str(shape), known, str(),
             numel());
  Tensor t = *this;
  t.strides_ = contiguous_strides(shape);
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::narrow(int d, int64_t start, int64_t length) const {
  const int n = dim();
  const int i = d < 0 ? d + n : d;
  FP8T_CHECK(i >= 0 && i < n, "narrow: dimension {} out of range for {}", d, str());
  FP8T_CHECK(start >= 0 && length >= 0 && start + length <= shape_[i], "narrow({}, {}, {}) out of range for {}", d,
             start, length, str());
  Tensor t = *this;
  t.offset_ += start * strides_[i];
  t.shape_[i] = length;
  return t;
}

Tensor Tensor::as_strided(Shape shape, std::vector<int64_t> strides, int64_t offset) const {
  FP8T_CHECK(shape.size() == strides.size(), "as_strided: {} sizes but {} strides", shape.size(), strides.size());
  int64_t lo = offset_ + offset, hi = offset_ + offset;
  for (size_t i = 0; i < shape.size(); ++i) {
    FP8T_CHECK(shape[i] >= 0, "as_strided: negative size in {}", shape_str(shape));
    if (shape[i] == 0) {
      hi = lo - 1;
      break;
    }
    const int64_t extent = (shape[i] - 1) * strides[i];
    (extent < 0 ? lo : hi) += extent;
  }
  const int64_t capacity = static_cast<int64_t>(storage().bytes() / dtype_size(dtype_));
  FP8T_CHECK(lo >= 0 && hi < capacity, "as_strided{} strides{} offset {} leaves the storage of {} elements",
             shape_str(shape), shape_str(strides), offset, capacity);
  Tensor t = *this;
  t.offset_ += offset;
  t.shape_ = std::move(shape);
  t.strides_ = std::move(strides);
  return t;
}

namespace {
// Strided element copy on the host, any rank: walks the destination in row-major order.
void host_strided_copy(const Tensor& src, void* dst) {
  const size_t es = dtype_size(src.dtype());
  const int n = src.dim();
  const int64_t total = src.numel();
  std::vector<int64_t> idx(n, 0);
  const char* base = static_cast<const char*>(src.raw());
  char* out = static_cast<char*>(dst);
  for (int64_t e = 0; e < total; ++e) {
    int64_t off = 0;
    for (int k = 0; k < n; ++k) off += idx[k] * src.stride(k);
    std::memcpy(out + e * es, base + off * static_cast<int64_t>(es), es);
    for (int k = n - 1; k >= 0; --k) {
      if (++idx[k] < src.size(k)) break;
      idx[k] = 0;
    }
  }
}
}  // namespace

Tensor Tensor::clone(MemCategory category) const {
  Tensor t = empty(shape_, dtype_, category, device());
  if (is_contiguous()) {
    storage().backend().copy(t.raw(), device(), raw(), device(), nbytes());
  } else {
    FP8T_CHECK(device().is_cpu(), "clone of a strided {} tensor: use ops::copy on this device", device().str());
    host_strided_copy(*this, t.raw());
  }
  return t;
}

Tensor Tensor::to(Device target, MemCategory category) const {
  if (!is_contiguous()) return clone(category).to(target, category);
  Tensor t = empty(shape_, dtype_, category, target);
  Backend& b = target.is_cpu() ? storage().backend() : backend(target);
  b.copy(t.raw(), target, raw(), device(), nbytes());
  return t;
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  FP8T_CHECK(dtype_of<T>() == dtype_, "to_vector: tensor holds {}, asked for {}", dtype_name(dtype_),
             dtype_name(dtype_of<T>()));
  std::vector<T> out(static_cast<size_t>(numel()));
  if (!is_contiguous()) {
    const Tensor c = device().is_cpu() ? *this : clone();
    if (c.is_contiguous()) return c.to_vector<T>();
    host_strided_copy(c, out.data());
    return out;
  }
  storage().backend().copy(out.data(), Device::cpu(), raw(), device(), nbytes());
  return out;
}

void Tensor::zero_() {
  FP8T_CHECK(is_contiguous(), "zero_() needs a contiguous tensor, got {}", str());
  storage().backend().fill_zero(raw(), nbytes());
}

void Tensor::copy_from(const Tensor& src) {
  FP8T_CHECK(is_contiguous() && src.is_contiguous(), "copy_from needs contiguous tensors: {} <- {}", str(), src.str());
  FP8T_CHECK(dtype_ == src.dtype() && numel() == src.numel(), "copy_from: {} <- {} differ in dtype or size", str(),
             src.str());
  Backend& b = device().is_cpu() ? src.storage().backend() : storage().backend();
  b.copy(raw(), device(), src.raw(), src.device(), nbytes());
}

std::string Tensor::str() const {
  if (!defined()) return "undefined";
  std::string s = std::string(dtype_name(dtype_)) + shape_str(shape_) + " " + device().str();
  if (!is_contiguous()) s += " strides" + shape_str(strides_);
  return s;
}

#define FP8T_TENSOR_INSTANTIATE(T)                                                                        \
  template Tensor Tensor::from_vector<T>(const std::vector<T>&, Shape, MemCategory, Device);             \
  template std::vector<T> Tensor::to_vector<T>() const;
FP8T_TENSOR_INSTANTIATE(float)
FP8T_TENSOR_INSTANTIATE(double)
FP8T_TENSOR_INSTANTIATE(bf16)
FP8T_TENSOR_INSTANTIATE(uint8_t)
FP8T_TENSOR_INSTANTIATE(uint16_t)
FP8T_TENSOR_INSTANTIATE(int32_t)
FP8T_TENSOR_INSTANTIATE(int64_t)
#undef FP8T_TENSOR_INSTANTIATE

}  // namespace fp8train
