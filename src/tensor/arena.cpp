// ArenaLayout and Arena (see arena.h).
#include "tensor/arena.h"

#include <algorithm>
#include <cstdint>
#include <unordered_set>

namespace fp8train {

int ArenaLayout::add_region(int64_t elements, int group) {
  FP8T_CHECK(!finished_, "arena layout: add_region after finish()");
  FP8T_CHECK(elements >= 0, "arena layout: a region of {} elements", elements);
  FP8T_CHECK(group >= 0, "arena layout: group {} is negative", group);
  regions_.push_back({elements, group, 0});
  return static_cast<int>(regions_.size()) - 1;
}

void ArenaLayout::add_view(std::string name, Shape shape, int region, int64_t offset_in_region) {
  FP8T_CHECK(!finished_, "arena layout: add_view('{}') after finish()", name);
  FP8T_CHECK(region >= 0 && region < static_cast<int>(regions_.size()), "arena layout: view '{}' names region {} of {}",
             name, region, regions_.size());
  View v;
  v.numel = 1;
  for (int64_t s : shape) {
    FP8T_CHECK(s >= 0, "arena layout: view '{}' has a negative size in {}", name, shape_str(shape));
    v.numel *= s;
  }
  const Region& r = regions_[static_cast<size_t>(region)];
  FP8T_CHECK(offset_in_region >= 0 && offset_in_region + v.numel <= r.elements,
             "arena layout: view '{}' ({} elements at {}) leaves its region of {} elements", name, v.numel,
             offset_in_region, r.elements);
  v.name = std::move(name);
  v.shape = std::move(shape);
  v.region = region;
  v.offset_in_region = offset_in_region;
  v.group = r.group;
  views_.push_back(std::move(v));
}

void ArenaLayout::finish() {
  FP8T_CHECK(!finished_, "arena layout: finish() called twice");
  std::unordered_set<std::string_view> names;
  for (const View& v : views_)
    FP8T_CHECK(names.insert(v.name).second, "arena layout: view '{}' declared twice", v.name);
  // No two views of a region may overlap (they would alias one another's elements).
  std::vector<std::vector<const View*>> by_region(regions_.size());
  for (const View& v : views_) by_region[static_cast<size_t>(v.region)].push_back(&v);
  for (auto& list : by_region) {
    std::sort(list.begin(), list.end(),
              [](const View* a, const View* b) { return a->offset_in_region < b->offset_in_region; });
    for (size_t i = 1; i < list.size(); ++i)
      FP8T_CHECK(list[i - 1]->offset_in_region + list[i - 1]->numel <= list[i]->offset_in_region,
                 "arena layout: views '{}' and '{}' overlap", list[i - 1]->name, list[i]->name);
  }
  int max_group = -1;
  for (const Region& r : regions_) max_group = std::max(max_group, r.group);
  int64_t at = 0;
  for (int g = 0; g <= max_group; ++g)
    for (Region& r : regions_) {
      if (r.group != g) continue;
      at = (at + kAlignElements - 1) / kAlignElements * kAlignElements;
      r.offset = at;
      at += r.elements;
    }
  elements_ = (at + kAlignElements - 1) / kAlignElements * kAlignElements;  // whole rows of kAlignElements
  for (View& v : views_) v.offset = regions_[static_cast<size_t>(v.region)].offset + v.offset_in_region;
  finished_ = true;
}

void ArenaLayout::check_finished() const { FP8T_CHECK(finished_, "arena layout used before finish()"); }

int64_t ArenaLayout::elements() const {
  check_finished();
  return elements_;
}

const ArenaLayout::View* ArenaLayout::find(std::string_view name) const {
  for (const View& v : views_)
    if (v.name == name) return &v;
  return nullptr;
}

const ArenaLayout::View& ArenaLayout::view(std::string_view name) const {
  const View* v = find(name);
  FP8T_CHECK(v != nullptr, "the arena has no view named '{}'", name);
  return *v;
}

ArenaRange ArenaLayout::group_range(int group) const {
  check_finished();
  ArenaRange out;
  bool any = false;
  for (const Region& r : regions_) {
    if (r.group != group) continue;
    if (!any) out.begin = r.offset;
    out.end = r.offset + r.elements;
    any = true;
  }
  return out;
}

int64_t ArenaLayout::view_elements() const {
  int64_t n = 0;
  for (const View& v : views_) n += v.numel;
  return n;
}

Arena::Arena(std::shared_ptr<const ArenaLayout> layout, DType dtype, MemCategory category, Device device)
    : layout_(std::move(layout)) {
  FP8T_CHECK(layout_ != nullptr && layout_->finished(), "an arena needs a finished layout");
  const int64_t es = static_cast<int64_t>(dtype_size(dtype));
  const int64_t n = layout_->elements();
  // Allocators align to less than kBaseAlignBytes (64 bytes on the CPU): allocate one alignment's worth more and
  // start at the first aligned element. Allocations are aligned to their element size, so the pad is whole elements.
  const int64_t slack = static_cast<int64_t>(ArenaLayout::kBaseAlignBytes) / es;
  Tensor whole = Tensor::zeros({n + slack}, dtype, category, device);
  const auto address = reinterpret_cast<uintptr_t>(whole.raw());
  const uintptr_t misalign = address % ArenaLayout::kBaseAlignBytes;
  const int64_t pad = misalign == 0 ? 0 : static_cast<int64_t>(ArenaLayout::kBaseAlignBytes - misalign) / es;
  FP8T_CHECK((address + static_cast<uintptr_t>(pad * es)) % ArenaLayout::kBaseAlignBytes == 0,
             "arena: the allocator returned {:#x}, not aligned to the {}-byte element size", address, es);
  flat_ = whole.narrow(0, pad, n);
}

const ArenaLayout& Arena::layout() const {
  FP8T_CHECK(defined(), "use of an undefined arena");
  return *layout_;
}

Tensor Arena::range(ArenaRange r) const {
  FP8T_CHECK(r.begin >= 0 && r.begin <= r.end && r.end <= layout().elements(),
             "arena range [{}, {}) outside its {} elements", r.begin, r.end, layout().elements());
  return flat_.narrow(0, r.begin, r.size());
}

Tensor Arena::view(size_t i) const {
  const ArenaLayout::View& v = layout().view(i);
  return flat_.as_strided(v.shape, contiguous_strides(v.shape), v.offset);
}

Tensor Arena::view(std::string_view name) const {
  const ArenaLayout::View& v = layout().view(name);
  return flat_.as_strided(v.shape, contiguous_strides(v.shape), v.offset);
}

Tensor Arena::region(int r) const {
  FP8T_CHECK(r >= 0 && r < static_cast<int>(layout().regions().size()), "arena region {} of {}", r,
             layout().regions().size());
  const ArenaLayout::Region& reg = layout().regions()[static_cast<size_t>(r)];
  return flat_.narrow(0, reg.offset, reg.elements);
}

void Arena::adopt(int r, const std::shared_ptr<Storage>& storage) const {
  FP8T_CHECK(storage != nullptr, "arena adopt: no storage");
  const Tensor target = region(r);
  FP8T_CHECK(storage->bytes() == target.nbytes(),
             "arena adopt: a storage of {} bytes cannot fill region {} of {} bytes", storage->bytes(), r,
             target.nbytes());
  const size_t offset =
      static_cast<size_t>(static_cast<char*>(target.raw()) - static_cast<char*>(flat_.storage().data()));
  storage->move_into(flat_.storage_ptr(), offset);
}

}  // namespace fp8train
