// ZeRO-1 (see zero.h).
#include "dist/zero.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "ops/elementwise.h"
#include "ops/sum_squares.h"

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

Zero1::Zero1(Communicator& dp, const optim::ParamArenas& params, Communicator* experts, int64_t bucket_elements)
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
  // The norm's segments: each parameter's slice inside this rank's shards, in registration order (one rank: every
  // parameter whole, the same sums as optim::global_grad_norm).
  std::vector<int64_t> bounds;
  for (const ArenaLayout::View& v : params.layout().views())
    for (const Section& s : sections_) {
      const ArenaRange mine = s.mine();
      const int64_t b = std::max(v.offset, mine.begin), e = std::min(v.offset + v.numel, mine.end);
      if (b >= e) continue;
      bounds.push_back(b);
      bounds.push_back(e);
    }
  segments_ = static_cast<int64_t>(bounds.size() / 2);
  if (segments_ > 0)
    bounds_ = Tensor::from_vector(bounds, {segments_, 2}, MemCategory::Workspace, params.grads.device());
}

ArenaRange Zero1::shard() const {
  FP8T_CHECK(sections_.size() == 1, "ZeRO-1: this rank has {} shards (sharded experts: use shards())",
             sections_.size());
  return sections_.front().mine();
}

std::vector<ArenaRange> Zero1::shards() const {
  std::vector<ArenaRange> out;
  for (const Section& s : sections_) out.push_back(s.mine());
  return out;
}

void Zero1::reduce_gradients(const ExecCtx& ctx) {
  for (const Section& s : sections_) reduce_section(ctx, s);
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
    for (const Section& s : sections_) {
      const ArenaRange mine = s.mine();
      if (!mine.empty())
        ops::scale(ctx, params_.grads.range(mine).view({-1, ArenaLayout::kAlignElements}),
                   static_cast<float>(max_norm / (norm + 1e-6)));
    }
  return norm;
}

void Zero1::gather_parameters(const ExecCtx& ctx) {
  for (const Section& s : sections_) {
    if (s.comm->size() == 1) continue;
    s.comm->all_gatherv(params_.values.range(s.mine()), params_.values.range(s.range), s.plan.counts, ctx);
  }
}

}  // namespace fp8train::dist
