// ZeRO-1 data parallelism on the flat parameter arenas (optim/param.h): every DP rank keeps the whole FP32 master
// weights and gradients, but the optimizer state (AdamW's moments) and the update of the elements it covers only
// for its shard: one contiguous range of the arena per rank, in rank order, each starting at a multiple of
// ArenaLayout::kAlignElements (shard_arena). One step:
//   1. each rank accumulates the gradients of its own micro-batches into its gradient arena (the trainer);
//   2. reduce_gradients: gradients reduce-scattered, so rank r holds Σ over ranks of its shard — in buckets of at
//      most `bucket_elements` per rank: each bucket an all_to_allv of every rank's slices of the shards, then the
//      received slices added in rank order ((g₀ + g₁) + g₂) + ... — a fixed order, so every world size that
//      splits the micro-batches the same way sums the same way, and the result never depends on timing;
//   3. clip_grad_norm: Σ g² per parameter slice of the shard (the sum_squares op, FP64), the shard's total, the
//      totals of all ranks added in rank order: every rank gets the same norm and scales its shard;
//   4. AdamW on the shard (optim::AdamW built with shard(): moments for those elements only);
//   5. gather_parameters: every rank's updated shard of the master weights all-gathered into every rank's arena.
// Gradients outside a rank's shard are left as they were accumulated (not the global sum): after step 2 only the
// shard's gradients mean anything.
// Sharded experts (expert parallelism with each rank holding only its experts, optim::ParamArenas::experts): the
// arena's expert prefix differs between EP ranks, so it is a section of its own, reduced, sharded and gathered over
// the ranks holding the same experts (the DP group), while the rest is over the whole gradient group as above. A
// rank then has two shards (the experts', then the replicated parameters'), and the gradient norm adds both
// sections' squares over the whole group: every element of the model once.
// Not done yet: overlapping the reduce-scatter with backward (it runs after the last micro-batch).
#pragma once
#include <cstdint>
#include <vector>

#include "dist/communicator.h"
#include "optim/param.h"

namespace fp8train::dist {

struct ShardPlan {
  std::vector<int64_t> begins, counts;  // per rank, elements of the arena
  ArenaRange range(int rank) const {
    return {begins[static_cast<size_t>(rank)], begins[static_cast<size_t>(rank)] + counts[static_cast<size_t>(rank)]};
  }
};

// Ranks' shards of an arena of `elements` elements (a multiple of kAlignElements): equal sizes rounded up to
// kAlignElements, the last ones shorter or empty.
ShardPlan shard_arena(int64_t elements, int ranks);

class Zero1 {
 public:
  // 4 Mi elements (16 MiB of FP32) per rank and bucket unless told otherwise.
  static constexpr int64_t kDefaultBucketElements = int64_t{1} << 22;

  // experts: the ranks holding the same experts as this one, when params.experts is not empty (else unused).
  Zero1(Communicator& dp, const optim::ParamArenas& params, Communicator* experts = nullptr,
        int64_t bucket_elements = kDefaultBucketElements);

  Communicator& comm() const { return dp_; }
  // The replicated parameters' shard plan (element offsets of the arena).
  const ShardPlan& plan() const { return sections_.back().plan; }
  // This rank's shard: one range (throws with sharded experts: see shards()).
  ArenaRange shard() const;
  // This rank's shards in arena order: the experts' (with sharded experts), then the replicated parameters'.
  std::vector<ArenaRange> shards() const;

  void reduce_gradients(const ExecCtx& ctx);
  // The global gradient norm (every rank the same); scales the shard's gradients when it exceeds max_norm > 0.
  double clip_grad_norm(const ExecCtx& ctx, double max_norm);
  void gather_parameters(const ExecCtx& ctx);

 private:
  // A range of the arena reduced, sharded and gathered over one group (plan offsets are the arena's).
  struct Section {
    Communicator* comm;
    ArenaRange range;
    ShardPlan plan;
    ArenaRange mine() const { return plan.range(comm->rank()); }
  };
  void reduce_section(const ExecCtx& ctx, const Section& s);

  Communicator& dp_;
  const optim::ParamArenas& params_;
  std::vector<Section> sections_;  // [experts,] replicated
  int64_t bucket_;
  Tensor bounds_;  // I64 [segments, 2]: the parameters' slices inside this shard, for the norm
  int64_t segments_ = 0;
};

}  // namespace fp8train::dist
