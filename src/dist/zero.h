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
// Interleaved shards, overlapped with backward (plain DP: no sharded experts; docs/distributed.md): given the
// order in which the parameters' gradients become final in a backward (ready groups, one per arena view: 0 first),
// the arena is cut into buckets — contiguous ranges of regions of one ready group, at most `bucket_elements` per
// rank — listed in ready order, and each bucket into one slice per rank (shard_arena of the bucket): rank r owns
// slice r of every bucket, so its shard is a list of ranges (shards()). A bucket is reduced as above (an
// all_to_allv of the bucket's slices, the received slices added in rank order), as soon as its group is final
// (group_ready, called from the model's backward of the step's last micro-batch) when overlap is on, on a side
// queue: a worker thread on the CPU, a side stream on a GPU; reduce_gradients then waits for every bucket. Every
// element is summed by the same adds in the same order with overlap on or off, so the two are bit-identical.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "common/host_worker.h"
#include "dist/communicator.h"
#include "optim/param.h"
#include "tensor/backend.h"

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

// One bucket of the interleaved plan: a contiguous range of the arena whose gradients are final once ready group
// `group` is, cut into one slice per rank (plan offsets are the arena's).
struct Bucket {
  ArenaRange range;
  int group = 0;
  ShardPlan slices;
};

// The interleaved buckets of `range` (a run of whole regions of `layout`): view_groups holds each layout view's
// ready group (layout().views() order); a region's group is the largest of its views' (it is final when its last
// view is), and it extends to the next region's start (padding included), so the buckets tile `range`. Runs of
// consecutive regions of one group, ordered by (group, offset), are cut into buckets of at most ranks x
// bucket_elements elements.
std::vector<Bucket> plan_buckets(const ArenaLayout& layout, ArenaRange range, const std::vector<int>& view_groups,
                                 int ranks, int64_t bucket_elements);

class Zero1 {
 public:
  // 16 Mi elements (64 MiB of FP32) per rank and bucket unless told otherwise: the default of parallel.dp_bucket_mib,
  // which the trainer passes (docs/distributed.md: NCCL's collectives reach their plateau only at such messages).
  static constexpr int64_t kDefaultBucketElements = int64_t{1} << 24;

  // experts: the ranks holding the same experts as this one, when params.experts is not empty (else unused).
  // view_groups: the interleaved plan's ready groups per layout view (plan_buckets), with no sharded experts;
  // empty: one contiguous shard per rank (shard_arena). overlap: reduce buckets from group_ready on a side queue
  // (interleaved plan only; off where the communicator cannot be called from another thread).
  Zero1(Communicator& dp, const optim::ParamArenas& params, Communicator* experts = nullptr,
        int64_t bucket_elements = kDefaultBucketElements, std::vector<int> view_groups = {}, bool overlap = false);
  ~Zero1();
  Zero1(const Zero1&) = delete;
  Zero1& operator=(const Zero1&) = delete;

  Communicator& comm() const { return dp_; }
  // The replicated parameters' shard plan (element offsets of the arena).
  const ShardPlan& plan() const { return sections_.back().plan; }
  // This rank's shard: one range (throws with sharded experts: see shards()).
  ArenaRange shard() const;
  // This rank's shards in arena order: the experts' (with sharded experts), then the replicated parameters'; with
  // the interleaved plan, its slices of the buckets in arena order (adjacent ones merged; [0, 0) if none).
  std::vector<ArenaRange> shards() const;
  bool interleaved() const { return interleaved_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  // Whether group_ready launches buckets while the backward runs.
  bool overlapping() const { return overlap_; }
  // Buckets the last reduce_gradients found launched by group_ready (during the backward).
  size_t overlapped_buckets() const { return overlapped_; }

  // The gradients of ready group `group` (and of every group before it) are final in this step's last backward:
  // launches the buckets that are complete, in plan order (every rank the same). Does nothing unless overlapping().
  void group_ready(const ExecCtx& ctx, int group);
  // Reduces what group_ready did not launch and waits for every bucket; rethrows a bucket's error.
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
  // recv_buffer: where the bucket's slices are received (null: a scratch tensor of the context's device).
  void reduce_bucket(const ExecCtx& ctx, const Bucket& b, const Tensor* recv_buffer);
  void launch(const ExecCtx& ctx, size_t bucket);
  void wait();

  Communicator& dp_;
  const optim::ParamArenas& params_;
  std::vector<Section> sections_;  // [experts,] replicated
  int64_t bucket_;
  std::vector<Bucket> buckets_;   // the interleaved plan (empty: sections_ as contiguous shards)
  bool interleaved_ = false;      // buckets_ is the plan
  std::vector<ArenaRange> mine_;  // this rank's slices (interleaved)
  bool overlap_ = false;
  size_t launched_ = 0;  // buckets launched this step, a prefix of buckets_
  size_t overlapped_ = 0;
  // The side queue: a worker thread on the CPU (buckets run in order), a side stream on a GPU. The side stream's
  // buckets receive into one buffer of the largest bucket's size, kept for the run: they run in order there, so each
  // reuses it after the one before, and no scratch block allocated for the compute stream is freed while the side
  // stream still reads it (holding every bucket's scratch until the wait cost the whole gradient arena again).
  std::unique_ptr<HostWorker> worker_;
  Tensor side_recv_;
  std::unique_ptr<SideQueue> side_;  // a GPU's side stream, made on first use
  Tensor bounds_;  // I64 [segments, 2]: the parameters' slices inside this shard, for the norm
  int64_t segments_ = 0;
};

}  // namespace fp8train::dist
