// ZeRO-1 (see zero.h).
#include "dist/zero.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "ops/elementwise.h"
#include "ops/sum_squares.h"
#include "tensor/backend.h"

namespace fp8train::dist {

ShardPlan shard_arena(int64_t elements, int ranks) {
  constexpr int64_t a = ArenaLayout::kAlignElements;
  FP8T_CHECK(ranks >= 1 && elements >= 0 && elements % a == 0,
             "shard_arena: {} elements over {} ranks (elements must be a multiple of {})", elements, ranks, a);
  const int64_t rows = elements / a;
  const int64_t per = (rows + ranks - 1) / ranks * a;
  ShardPlan p;
  for (int r = 0; r < ranks; ++r) {
    const int64_t begin = std::min(elements, per * r);
    p.begins.push_back(begin);
    p.counts.push_back(std::min(elements, begin + per) - begin);
  }
  return p;
}

std::vector<Bucket> plan_buckets(const ArenaLayout& layout, ArenaRange range, const std::vector<int>& view_groups,
                                 int ranks, int64_t bucket_elements) {
  constexpr int64_t a = ArenaLayout::kAlignElements;
  FP8T_CHECK(view_groups.size() == layout.views().size(), "plan_buckets: {} ready groups for the {} views of the arena",
             view_groups.size(), layout.views().size());
  FP8T_CHECK(ranks >= 1 && bucket_elements > 0 && bucket_elements % a == 0 && range.begin % a == 0 &&
                 range.end % a == 0 && range.begin <= range.end,
             "plan_buckets: range [{}, {}) over {} ranks in buckets of {} elements (multiples of {})", range.begin,
             range.end, ranks, bucket_elements, a);
  // Regions in arena order, each with its group (the largest of its views').
  std::vector<std::pair<int64_t, int>> starts;  // (offset, group)
  for (size_t r = 0; r < layout.regions().size(); ++r) {
    const ArenaLayout::Region& reg = layout.regions()[r];
    if (reg.offset < range.begin || reg.offset >= range.end) continue;
    int group = -1;
    for (size_t v = 0; v < layout.views().size(); ++v)
      if (layout.views()[v].region == static_cast<int>(r)) group = std::max(group, view_groups[v]);
    FP8T_CHECK(group >= 0 || reg.elements == 0, "plan_buckets: region {} holds no view", r);
    starts.emplace_back(reg.offset, std::max(group, 0));
  }
  std::sort(starts.begin(), starts.end());
  FP8T_CHECK(range.empty() || (!starts.empty() && starts.front().first == range.begin),
             "plan_buckets: [{}, {}) does not start at a region", range.begin, range.end);
  // Runs of consecutive regions of one group: (group, begin, end).
  struct Run {
    int group;
    int64_t begin, end;
  };
  std::vector<Run> runs;
  for (size_t i = 0; i < starts.size(); ++i) {
    const int64_t end = i + 1 < starts.size() ? starts[i + 1].first : range.end;
    if (!runs.empty() && runs.back().group == starts[i].second && runs.back().end == starts[i].first)
      runs.back().end = end;
    else
      runs.push_back({starts[i].second, starts[i].first, end});
  }
  std::stable_sort(runs.begin(), runs.end(), [](const Run& x, const Run& y) { return x.group < y.group; });
  std::vector<Bucket> buckets;
  const int64_t most = bucket_elements * ranks;
  for (const Run& run : runs)
    for (int64_t b = run.begin; b < run.end; b += most) {
      Bucket k{{b, std::min(run.end, b + most)}, run.group, {}};
      k.slices = shard_arena(k.range.size(), ranks);
      for (int64_t& x : k.slices.begins) x += b;
      buckets.push_back(std::move(k));
    }
  return buckets;
}

Zero1::Zero1(Communicator& dp, const optim::ParamArenas& params, Communicator* experts, int64_t bucket_elements,
             std::vector<int> view_groups, bool overlap)
    : dp_(dp), params_(params), bucket_(bucket_elements) {
  params.validate();
  FP8T_CHECK(bucket_elements > 0 && bucket_elements % ArenaLayout::kAlignElements == 0,
             "ZeRO-1: the bucket size {} must be a positive multiple of {} elements", bucket_elements,
             ArenaLayout::kAlignElements);
  const int64_t n = params.layout().elements();
  auto section = [](Communicator* comm, ArenaRange range) {
    ShardPlan plan = shard_arena(range.size(), comm->size());
    for (int64_t& b : plan.begins) b += range.begin;
    return Section{comm, range, plan};
  };
  if (!params.experts.empty()) {
    FP8T_CHECK(experts != nullptr && dp.size() % experts->size() == 0,
               "ZeRO-1: sharded experts need the group of ranks holding the same experts (a divisor of the {} "
               "gradient ranks)",
               dp.size());
    sections_.push_back(section(experts, params.experts));
  }
  sections_.push_back(section(&dp, {params.experts.end, n}));
  if (!view_groups.empty()) {
    FP8T_CHECK(params.experts.empty(), "ZeRO-1: interleaved shards do not cover sharded experts");
    interleaved_ = true;
    buckets_ = plan_buckets(params.layout(), {0, n}, view_groups, dp.size(), bucket_elements);
    for (const Bucket& b : buckets_) {
      const ArenaRange r = b.slices.range(dp.rank());
      if (r.empty()) continue;
      mine_.push_back(r);
    }
    std::sort(mine_.begin(), mine_.end(), [](const ArenaRange& x, const ArenaRange& y) { return x.begin < y.begin; });
    std::vector<ArenaRange> merged;
    for (const ArenaRange& r : mine_)
      if (!merged.empty() && merged.back().end == r.begin)
        merged.back().end = r.end;
      else
        merged.push_back(r);
    mine_ = merged.empty() ? std::vector<ArenaRange>{{0, 0}} : merged;
    // A worker thread on the CPU calls the communicator; a GPU queues on a side stream from this thread.
    overlap_ = overlap && dp.size() > 1 && (!params.grads.device().is_cpu() || dp.callable_from_other_threads());
    if (overlap_ && params.grads.device().is_cpu()) worker_ = std::make_unique<HostWorker>();
  }
  // The norm's segments: each parameter's slice inside this rank's shards, in registration order (one rank: every
  // parameter whole, the same sums as optim::global_grad_norm).
  std::vector<int64_t> bounds;
  for (const ArenaLayout::View& v : params.layout().views())
    for (const ArenaRange& mine : shards()) {
      const int64_t b = std::max(v.offset, mine.begin), e = std::min(v.offset + v.numel, mine.end);
      if (b >= e) continue;
      bounds.push_back(b);
      bounds.push_back(e);
    }
  segments_ = static_cast<int64_t>(bounds.size() / 2);
  if (segments_ > 0)
    bounds_ = Tensor::from_vector(bounds, {segments_, 2}, MemCategory::Workspace, params.grads.device());
}

Zero1::~Zero1() {
  // The side stream may still use side_recv_ if a step failed between a launch and its wait.
  if (side_) try {
      side_->synchronize();
    } catch (...) {  // already failing: the error being handled says more
    }
}

ArenaRange Zero1::shard() const {
  if (interleaved_) {
    FP8T_CHECK(mine_.size() == 1, "ZeRO-1: this rank has {} interleaved shards (use shards())", mine_.size());
    return mine_.front();
  }
  FP8T_CHECK(sections_.size() == 1, "ZeRO-1: this rank has {} shards (sharded experts: use shards())",
             sections_.size());
  return sections_.front().mine();
}

std::vector<ArenaRange> Zero1::shards() const {
  if (interleaved_) return mine_;
  std::vector<ArenaRange> out;
  for (const Section& s : sections_) out.push_back(s.mine());
  return out;
}

void Zero1::reduce_bucket(const ExecCtx& ctx, const Bucket& b, const Tensor* recv_buffer) {
  const int n = dp_.size(), me = dp_.rank();
  const Tensor grads = params_.grads.flat();
  const int64_t len = b.slices.counts[static_cast<size_t>(me)];
  const std::vector<int64_t> recv_counts(static_cast<size_t>(n), len);
  // The bucket's slices lie back to back in rank order: the gradients are the send buffer as they are.
  const Tensor recv = recv_buffer ? *recv_buffer : ctx.scratch({std::max<int64_t>(n * len, 1)}, DType::F32);
  FP8T_CHECK(recv.numel() >= n * len, "ZeRO-1: a receive buffer of {} elements for a bucket slice of {} x {}",
             recv.numel(), n, len);
  dp_.all_to_allv(grads.narrow(0, b.range.begin, b.range.size()), b.slices.counts, recv.narrow(0, 0, n * len),
                  recv_counts, ctx);
  if (len == 0) return;
  // ((g0 + g1) + g2) + ... in rank order, as reduce_section adds.
  const Tensor out =
      grads.narrow(0, b.slices.begins[static_cast<size_t>(me)], len).view({-1, ArenaLayout::kAlignElements});
  const auto block = [&](int r) { return recv.narrow(0, r * len, len).view({-1, ArenaLayout::kAlignElements}); };
  ops::add(ctx, block(0), block(1), out);
  for (int r = 2; r < n; ++r) ops::add(ctx, out, block(r), out);
}

void Zero1::launch(const ExecCtx& ctx, size_t i) {
  if (worker_) {  // after a failed bucket the rest are dropped: their exchanges would only wait for it too
    worker_->submit([this, ctx, i] { reduce_bucket(ctx, buckets_[i], nullptr); });
    return;
  }
  // A GPU: the side stream starts the bucket after the gradients queued so far on the compute stream.
  if (!side_) side_ = backend(ctx.device).side_queue();
  if (!side_recv_.defined()) {  // before the wait below: whatever used this memory before is then done
    int64_t most = 1;
    for (const Bucket& b : buckets_)
      most = std::max(most, dp_.size() * b.slices.counts[static_cast<size_t>(dp_.rank())]);
    side_recv_ = ctx.scratch({most}, DType::F32);
  }
  side_->side_waits_for_compute();
  reduce_bucket(ctx.with_stream(side_->side_stream()), buckets_[i], &side_recv_);
}

void Zero1::wait() {
  if (worker_) {
    worker_->wait_pending(0);
    return;
  }
  if (!side_) return;  // nothing launched
  side_->compute_waits_for(side_->side_mark());
  side_->reset();
}

void Zero1::group_ready(const ExecCtx& ctx, int group) {
  if (!overlap_) return;
  while (launched_ < buckets_.size() && buckets_[launched_].group <= group) launch(ctx, launched_++);
}

void Zero1::reduce_gradients(const ExecCtx& ctx) {
  if (!interleaved_) {
    for (const Section& s : sections_) reduce_section(ctx, s);
    return;
  }
  if (dp_.size() == 1) return;
  overlapped_ = launched_;
  if (overlap_) {
    while (launched_ < buckets_.size()) launch(ctx, launched_++);
    launched_ = 0;
    wait();
    return;
  }
  for (const Bucket& b : buckets_) reduce_bucket(ctx, b, nullptr);
}

void Zero1::reduce_section(const ExecCtx& ctx, const Section& sec) {
  Communicator& comm = *sec.comm;
  const int n = comm.size();
  if (n == 1) return;
  const Tensor grads = params_.grads.flat();
  const ArenaRange mine = sec.mine();
  int64_t longest = 0;
  for (int64_t c : sec.plan.counts) longest = std::max(longest, c);
  for (int64_t off = 0; off < longest; off += bucket_) {
    // Bucket: elements [off, off + bucket) of every rank's shard.
    std::vector<int64_t> send_counts(static_cast<size_t>(n)), recv_counts(static_cast<size_t>(n));
    int64_t send_total = 0;
    for (int r = 0; r < n; ++r) {
      const int64_t c = sec.plan.counts[static_cast<size_t>(r)];
      send_counts[static_cast<size_t>(r)] = std::clamp<int64_t>(c - off, 0, bucket_);
      send_total += send_counts[static_cast<size_t>(r)];
    }
    const int64_t len = std::clamp<int64_t>(mine.size() - off, 0, bucket_);
    for (int r = 0; r < n; ++r) recv_counts[static_cast<size_t>(r)] = len;
    // Every rank's slices of this bucket, back to back (the section itself when the bucket covers its shards).
    Tensor send;
    if (off == 0 && longest <= bucket_) {
      send = grads.narrow(0, sec.range.begin, sec.range.size());
    } else {
      send = ctx.scratch({send_total}, DType::F32);
      int64_t at = 0;
      for (int r = 0; r < n; ++r) {
        const int64_t c = send_counts[static_cast<size_t>(r)];
        if (c > 0) send.narrow(0, at, c).copy_from(grads.narrow(0, sec.plan.begins[static_cast<size_t>(r)] + off, c));
        at += c;
      }
    }
    const Tensor recv = ctx.scratch({std::max<int64_t>(n * len, 1)}, DType::F32);
    const Tensor recv_used = recv.narrow(0, 0, n * len);
    comm.all_to_allv(send, send_counts, recv_used, recv_counts, ctx);
    if (len == 0) continue;
    // ((g0 + g1) + g2) + ...: rank order, into the shard's gradients. len is a multiple of kAlignElements: rows of
    // that many elements let the elementwise op split the work across threads.
    const Tensor out = grads.narrow(0, mine.begin + off, len).view({-1, ArenaLayout::kAlignElements});
    const auto block = [&](int r) { return recv.narrow(0, r * len, len).view({-1, ArenaLayout::kAlignElements}); };
    ops::add(ctx, block(0), block(1), out);
    for (int r = 2; r < n; ++r) ops::add(ctx, out, block(r), out);
  }
}

double Zero1::clip_grad_norm(const ExecCtx& ctx, double max_norm) {
  double local = 0.0;
  if (segments_ > 0) {
    const Tensor sums = ctx.scratch({segments_}, DType::F64);
    ops::sum_squares_segments(ctx, params_.grads.flat(), bounds_, sums);
    for (double s : sums.to_vector<double>()) local += s;
  }
  const double norm = std::sqrt(sum_in_rank_order(dp_, local, ctx));
  if (max_norm > 0.0 && std::isfinite(norm) && norm > max_norm)
    for (const ArenaRange& mine : shards()) {
      if (!mine.empty())
        ops::scale(ctx, params_.grads.range(mine).view({-1, ArenaLayout::kAlignElements}),
                   static_cast<float>(max_norm / (norm + 1e-6)));
    }
  return norm;
}

void Zero1::gather_parameters(const ExecCtx& ctx) {
  if (interleaved_) {
    if (dp_.size() == 1) return;
    for (const Bucket& b : buckets_)
      dp_.all_gatherv(params_.values.range(b.slices.range(dp_.rank())), params_.values.range(b.range), b.slices.counts,
                      ctx);
    return;
  }
  for (const Section& s : sections_) {
    if (s.comm->size() == 1) continue;
    s.comm->all_gatherv(params_.values.range(s.mine()), params_.values.range(s.range), s.plan.counts, ctx);
  }
}

}  // namespace fp8train::dist
