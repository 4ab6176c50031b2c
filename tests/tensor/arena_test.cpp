// Flat arenas: layout (aligned regions, groups as contiguous ranges, views in declaration order), zero-filled
// arenas whose first element is 256-byte aligned, Storage::move_into / Arena::adopt (tensors of the moved storage
// see the arena, the bytes are booked once), and clear errors for layouts and adoptions that cannot work.
#include <gtest/gtest.h>

#include <cstdint>

#include "tensor/arena.h"
#include "tensor/backend.h"

namespace fp8train {
namespace {

// Three regions: a fused [2, 3] + [2, 3] buffer (group 0), a 1-D [5] (group 1), a [4, 4] (group 0).
std::shared_ptr<ArenaLayout> three_regions() {
  auto layout = std::make_shared<ArenaLayout>();
  const int fused = layout->add_region(12, 0);
  const int gain = layout->add_region(5, 1);
  const int square = layout->add_region(16, 0);
  layout->add_view("fused.a", {2, 3}, fused, 0);
  layout->add_view("gain", {5}, gain, 0);
  layout->add_view("fused.b", {2, 3}, fused, 6);
  layout->add_view("square", {4, 4}, square, 0);
  layout->finish();
  return layout;
}

TEST(ArenaLayout, PlacesGroupsContiguouslyWithAlignedRegions) {
  const auto layout = three_regions();
  constexpr int64_t A = ArenaLayout::kAlignElements;
  // group 0 first (regions in declaration order), then group 1, each region on an aligned element
  EXPECT_EQ(layout->regions()[0].offset, 0);
  EXPECT_EQ(layout->regions()[2].offset, A);
  EXPECT_EQ(layout->regions()[1].offset, 2 * A);
  EXPECT_EQ(layout->elements(), 3 * A);  // rounded up to whole rows of A
  EXPECT_EQ(layout->group_range(0), (ArenaRange{0, A + 16}));
  EXPECT_EQ(layout->group_range(1), (ArenaRange{2 * A, 2 * A + 5}));
  EXPECT_TRUE(layout->group_range(7).empty());
  // views stay in declaration order, each at its region's offset plus its own
  ASSERT_EQ(layout->views().size(), 4u);
  EXPECT_EQ(layout->view(0).name, "fused.a");
  EXPECT_EQ(layout->view(1).name, "gain");
  EXPECT_EQ(layout->view(2).name, "fused.b");
  EXPECT_EQ(layout->view("fused.b").offset, 6);
  EXPECT_EQ(layout->view("gain").offset, 2 * A);
  EXPECT_EQ(layout->view("gain").group, 1);
  EXPECT_EQ(layout->view("square").offset, A);
  EXPECT_EQ(layout->view_elements(), 12 + 5 + 16);
  EXPECT_EQ(layout->find("nothing"), nullptr);
  EXPECT_THROW(layout->view("nothing"), Error);
}

TEST(ArenaLayout, RejectsOverlapsDuplicatesAndOutOfRangeViews) {
  {
    ArenaLayout l;
    const int r = l.add_region(10, 0);
    l.add_view("a", {6}, r, 0);
    l.add_view("b", {6}, r, 4);
    EXPECT_THROW(l.finish(), Error);  // a and b share elements 4 and 5
  }
  {
    ArenaLayout l;
    const int r = l.add_region(10, 0);
    l.add_view("a", {2}, r, 0);
    l.add_view("a", {2}, r, 2);
    EXPECT_THROW(l.finish(), Error);
  }
  ArenaLayout l;
  const int r = l.add_region(10, 0);
  EXPECT_THROW(l.add_view("big", {11}, r, 0), Error);
  EXPECT_THROW(l.add_view("late", {4}, r, 7), Error);
  EXPECT_THROW(l.add_view("nowhere", {1}, 3, 0), Error);
  EXPECT_THROW(l.add_region(4, -1), Error);
  EXPECT_THROW((void)l.elements(), Error);  // not finished
  l.finish();
  EXPECT_THROW(l.add_region(4, 0), Error);
  EXPECT_THROW(l.finish(), Error);
}

TEST(Arena, IsZeroFilledAlignedAndViewsAliasIt) {
  const auto layout = three_regions();
  for (DType dt : {DType::F32, DType::BF16, DType::F64}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    const Arena arena(layout, dt, MemCategory::OptimizerState);
    EXPECT_EQ(arena.flat().numel(), layout->elements());
    EXPECT_EQ(arena.nbytes(), static_cast<size_t>(layout->elements()) * dtype_size(dt));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(arena.flat().raw()) % ArenaLayout::kBaseAlignBytes, 0u);
    for (size_t r = 0; r < layout->regions().size(); ++r)
      EXPECT_EQ(reinterpret_cast<uintptr_t>(arena.region(static_cast<int>(r)).raw()) % 256, 0u) << r;
    EXPECT_EQ(arena.category(), MemCategory::OptimizerState);
  }
  const Arena arena(layout, DType::F32, MemCategory::Weights);
  for (float x : arena.flat().to_vector<float>()) ASSERT_EQ(x, 0.0f);
  const Tensor b = arena.view("fused.b");
  EXPECT_EQ(b.shape(), (Shape{2, 3}));
  EXPECT_TRUE(b.is_contiguous());
  b.data<float>()[0] = 7.0f;
  EXPECT_EQ(arena.flat().to_vector<float>()[6], 7.0f);
  EXPECT_EQ(arena.region(0).to_vector<float>()[6], 7.0f);
  EXPECT_EQ(arena.range(layout->group_range(1)).numel(), 5);
  EXPECT_EQ(arena.view(1).raw(), arena.view("gain").raw());
  EXPECT_THROW(arena.range({0, layout->elements() + 1}), Error);
  EXPECT_THROW(arena.view("missing"), Error);
  auto unfinished = std::make_shared<ArenaLayout>();
  EXPECT_THROW(Arena(unfinished, DType::F32, MemCategory::Weights), Error);
}

TEST(Arena, AdoptedStoragesSeeTheArenaAndAreBookedOnce) {
  Allocator& alloc = backend(Device::cpu()).allocator();
  const int64_t w0 = alloc.stats().current_of(MemCategory::Weights);
  {
    const auto layout = three_regions();
    // A layer's fused buffer and two row views of it, as a SwiGLU layer keeps them.
    Tensor fused =
        Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {4, 3}, MemCategory::Weights);
    const Tensor top = fused.rows(0, 2), bottom = fused.rows(2, 4);
    Tensor square = Tensor::zeros({4, 4}, DType::F32, MemCategory::Weights);
    const void* old_address = fused.raw();
    {
      const Arena arena(layout, DType::F32, MemCategory::Weights);
      const int64_t arena_bytes = static_cast<int64_t>(arena.nbytes());
      arena.adopt(0, fused.storage_ptr());
      arena.adopt(2, square.storage_ptr());
      // the old blocks are released: what is booked is the arena (plus its alignment slack)
      const int64_t booked = alloc.stats().current_of(MemCategory::Weights) - w0;
      EXPECT_GE(booked, arena_bytes);
      EXPECT_LE(booked, arena_bytes + static_cast<int64_t>(ArenaLayout::kBaseAlignBytes));
      EXPECT_NE(fused.raw(), old_address);
      EXPECT_EQ(fused.raw(), arena.region(0).raw());
      EXPECT_EQ(bottom.raw(), arena.view("fused.b").raw());
      EXPECT_EQ(fused.storage().parent(), &arena.flat().storage());
      EXPECT_EQ(fused.category(), MemCategory::Weights);
      // the values moved, and writes through either side are seen by the other
      EXPECT_EQ(bottom.to_vector<float>(), (std::vector<float>{7, 8, 9, 10, 11, 12}));
      EXPECT_EQ(arena.view("fused.a").to_vector<float>(), top.to_vector<float>());
      arena.view("square").data<float>()[5] = -1.0f;
      EXPECT_EQ(square.to_vector<float>()[5], -1.0f);
      top.data<float>()[0] = 42.0f;
      EXPECT_EQ(arena.flat().to_vector<float>()[0], 42.0f);
      // a storage moves once, into a region of exactly its size, and keeps its category from then on
      EXPECT_THROW(arena.adopt(0, fused.storage_ptr()), Error);
      Tensor wrong = Tensor::zeros({5, 5}, DType::F32, MemCategory::Weights);
      EXPECT_THROW(arena.adopt(2, wrong.storage_ptr()), Error);
      EXPECT_THROW(fused.storage().set_category(MemCategory::Workspace), Error);
    }
    // the arena object is gone but the adopted storages keep its allocation alive
    EXPECT_EQ(fused.to_vector<float>()[0], 42.0f);
    EXPECT_EQ(square.to_vector<float>()[5], -1.0f);
  }
  // the last tensor gone, the arena's block is released once
  EXPECT_EQ(alloc.stats().current_of(MemCategory::Weights), w0);
}

}  // namespace
}  // namespace fp8train
