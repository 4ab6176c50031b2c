// Flat arenas: many named tensors in one allocation per (dtype, device, memory category) — the unit an optimizer
// updates in one call, a data-parallel reduction sums and ZeRO-1 shards (llm.c's single parameter buffer).
//   ArenaLayout — where each named view lives, in elements: regions (a run of views that belong together, e.g.
//                 one fused buffer holding several named matrices) placed group by group, each region starting at
//                 a multiple of kAlignElements; a group (e.g. "with weight decay") is thus one contiguous range.
//                 Views are listed in the order they were declared (the order checkpoints and norms walk them).
//   Arena       — one zero-filled allocation laid out by a layout, in one dtype. Arenas that mirror each other
//                 (master values, gradients, the optimizer's moments) share one layout, so a view sits at the same
//                 element offset in each, and an elementwise op over a range of one applies to the same elements
//                 of the others. Padding between regions stays zero in every arena.
// An existing Storage can move into a region (Arena::adopt, Storage::move_into): the tensors that already point
// at it then see the arena's memory. This layer knows nothing of models: groups are plain integers.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tensor/tensor.h"

namespace fp8train {

// Elements [begin, end) of an arena.
struct ArenaRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
  bool empty() const { return end <= begin; }
  friend bool operator==(const ArenaRange&, const ArenaRange&) = default;
};

class ArenaLayout {
 public:
  // Region starts are multiples of this many elements: at least 256 bytes for every dtype of 2 bytes or more
  // (BF16 moments 256 B, FP32 512 B), so a GPU kernel may load any region with aligned vectors.
  static constexpr int64_t kAlignElements = 128;
  // The byte alignment of an arena's first element.
  static constexpr size_t kBaseAlignBytes = 256;

  struct View {
    std::string name;
    Shape shape;
    int64_t numel = 0;
    int64_t offset = 0;  // first element in the arena (valid once finished)
    int region = 0;
    int64_t offset_in_region = 0;
    int group = 0;  // the region's group
  };
  struct Region {
    int64_t elements = 0;
    int group = 0;
    int64_t offset = 0;  // first element in the arena (valid once finished)
  };

  // Declares a region of `elements` elements in `group` (>= 0); returns its index.
  int add_region(int64_t elements, int group);
  // Declares a named view of `shape` starting `offset_in_region` elements into `region`.
  void add_view(std::string name, Shape shape, int region, int64_t offset_in_region);
  // Places the regions (groups in increasing order, the regions of a group in declaration order) and checks that
  // names are unique, every view lies inside its region, and no two views of a region overlap.
  void finish();

  bool finished() const { return finished_; }
  // Total elements, padding included: a multiple of kAlignElements, so an arena can be seen as a matrix of rows
  // of kAlignElements (what row-parallel elementwise ops split).
  int64_t elements() const;
  const std::vector<View>& views() const { return views_; }
  const std::vector<Region>& regions() const { return regions_; }
  const View& view(size_t i) const { return views_.at(i); }
  // The view called `name`; throws naming it when there is none.
  const View& view(std::string_view name) const;
  const View* find(std::string_view name) const;
  // The elements of a group: from its first region's start to its last region's end (empty when it has none).
  ArenaRange group_range(int group) const;
  // Elements covered by views (padding excluded).
  int64_t view_elements() const;

 private:
  void check_finished() const;
  std::vector<Region> regions_;
  std::vector<View> views_;
  int64_t elements_ = 0;
  bool finished_ = false;
};

class Arena {
 public:
  Arena() = default;  // undefined
  // A zero-filled arena for a finished layout; its first element is kBaseAlignBytes-aligned.
  Arena(std::shared_ptr<const ArenaLayout> layout, DType dtype, MemCategory category, Device device = default_device());

  bool defined() const { return layout_ != nullptr; }
  const ArenaLayout& layout() const;
  const std::shared_ptr<const ArenaLayout>& layout_ptr() const { return layout_; }
  DType dtype() const { return flat_.dtype(); }
  Device device() const { return flat_.device(); }
  MemCategory category() const { return flat_.category(); }
  // Bytes of the allocation (padding included).
  size_t nbytes() const { return flat_.nbytes(); }

  // All elements, [layout().elements()].
  Tensor flat() const { return flat_; }
  // Elements [r.begin, r.end), 1-D.
  Tensor range(ArenaRange r) const;
  // A view, contiguous, in its shape.
  Tensor view(size_t i) const;
  Tensor view(std::string_view name) const;
  // Region r, 1-D.
  Tensor region(int r) const;

  // Moves `storage` into region r (Storage::move_into): the storage must be on this arena's device and hold
  // exactly the region's bytes. Every tensor of that storage then reads and writes the arena.
  void adopt(int r, const std::shared_ptr<Storage>& storage) const;

 private:
  std::shared_ptr<const ArenaLayout> layout_;
  Tensor flat_;  // starts after an alignment pad inside its storage
};

}  // namespace fp8train
