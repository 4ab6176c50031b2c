// Expert parallelism: the token exchange of one MoE layer over the EP group (see expert_parallel.h).
#include "dist/expert_parallel.h"

#include "tensor/backend.h"

#include "common/error.h"

namespace fp8train::dist {

ExpertShard expert_shard(int64_t n_experts, int ep, int rank, const std::string& what) {
  FP8T_CHECK(ep >= 1 && rank >= 0 && rank < ep, "{}: EP rank {} outside an EP group of {}", what, rank, ep);
  FP8T_CHECK(n_experts > 0 && n_experts % ep == 0,
             "{}: {} routed experts cannot be split evenly over {} expert-parallel ranks (n_routed_experts must be "
             "a multiple of --ep)",
             what, n_experts, ep);
  return ExpertShard{n_experts, ep, rank};
}

void check_node_limited_routing(int64_t n_experts, int64_t n_group, int ep, int ranks_per_node) {
  if (ranks_per_node <= 0 || ranks_per_node >= ep) return;  // one node: every token stays on it
  FP8T_CHECK(ep % ranks_per_node == 0,
             "node-limited routing: {} expert-parallel ranks do not fill whole nodes of {} ranks", ep, ranks_per_node);
  FP8T_CHECK(n_group >= 1 && n_experts % n_group == 0, "node-limited routing: {} experts in {} routing groups",
             n_experts, n_group);
  const int64_t per_node = n_experts / (ep / ranks_per_node), per_group = n_experts / n_group;
  FP8T_CHECK(per_node % per_group == 0,
             "node-limited routing: a node holds {} experts ({} EP ranks of {} experts), not a whole number of "
             "routing groups of {} experts (n_routed_experts / n_group); set n_group to a multiple of the node "
             "count {} so that topk_group limits the nodes a token reaches",
             per_node, ranks_per_node, n_experts / ep, per_group, ep / ranks_per_node);
}

ExpertExchange::ExpertExchange(Communicator& ep, const ExpertShard& shard, const Tensor& expert_counts, int64_t align,
                               const ExecCtx& ctx)
    : comm_(&ep), shard_(shard) {
  const int64_t E = shard.n_experts, L = shard.local();
  const int P = ep.size();
  FP8T_CHECK(P == shard.ep && ep.rank() == shard.rank,
             "expert exchange: the EP group is rank {} of {}, the shard {} of {}", ep.rank(), P, shard.rank, shard.ep);
  FP8T_CHECK(expert_counts.dtype() == DType::I32 && expert_counts.numel() == E,
             "expert exchange: expected i32 [{}] expert counts, got {}", E, expert_counts.str());
  // 1. counts: block j of the send goes to rank j (its experts); block i of the receive came from rank i
  const Tensor recv_counts = Tensor::empty({E}, DType::I32, MemCategory::Workspace, ctx.device);
  comm_->all_to_all(expert_counts, recv_counts, ctx);
  const std::vector<int32_t> mine = expert_counts.to_vector<int32_t>();
  const std::vector<int32_t> theirs = recv_counts.to_vector<int32_t>();
  send_rows_.assign(static_cast<size_t>(P), 0);
  recv_rows_.assign(static_cast<size_t>(P), 0);
  std::vector<int64_t> local_load(static_cast<size_t>(L), 0);
  for (int p = 0; p < P; ++p)
    for (int64_t e = 0; e < L; ++e) {
      const size_t i = static_cast<size_t>(p * L + e);
      FP8T_CHECK(mine[i] >= 0 && theirs[i] >= 0, "expert exchange: negative expert count");
      send_rows_[static_cast<size_t>(p)] += mine[i];
      recv_rows_[static_cast<size_t>(p)] += theirs[i];
      local_load[static_cast<size_t>(e)] += theirs[i];
    }
  for (int p = 0; p < P; ++p) {
    sent_ += send_rows_[static_cast<size_t>(p)];
    received_ += recv_rows_[static_cast<size_t>(p)];
  }
  // global loads: every rank's totals for its own experts, gathered in rank order
  const Tensor loads = Tensor::empty({E}, DType::I64, MemCategory::Workspace, ctx.device);
  comm_->all_gather(Tensor::from_vector(local_load, {L}, MemCategory::Workspace, ctx.device), loads, ctx);
  load_ = loads.to_vector<int64_t>();
  // 2. the local plan: received rows are source-major, then expert, then token; the plan sorts them by expert,
  // then by received index (= source, then token), and pads each expert to `align`
  std::vector<int32_t> expert_of_row;
  expert_of_row.reserve(static_cast<size_t>(received_));
  for (int p = 0; p < P; ++p)
    for (int64_t e = 0; e < L; ++e)
      expert_of_row.insert(expert_of_row.end(), static_cast<size_t>(theirs[static_cast<size_t>(p * L + e)]),
                           static_cast<int32_t>(e));
  const Tensor selected = Tensor::from_vector(expert_of_row, {received_, 1}, MemCategory::Workspace, ctx.device);
  local_ = ops::moe_build_plan(ctx, selected, L, align);
}

Communicator::AllToAllvPart ExpertExchange::part(const Tensor& send, const Tensor& recv, int64_t row_elems,
                                                 bool back) const {
  Communicator::AllToAllvPart p{send, std::vector<int64_t>(send_rows_.size()), recv,
                                std::vector<int64_t>(recv_rows_.size())};
  for (size_t r = 0; r < p.send_counts.size(); ++r) {
    p.send_counts[r] = (back ? recv_rows_[r] : send_rows_[r]) * row_elems;
    p.recv_counts[r] = (back ? send_rows_[r] : recv_rows_[r]) * row_elems;
  }
  return p;
}

void ExpertExchange::exchange(const ExecCtx& ctx, const Tensor& send, const Tensor& recv, int64_t row_elems,
                              bool back) const {
  const Communicator::AllToAllvPart p = part(send, recv, row_elems, back);
  comm_->all_to_allv(p.send, p.send_counts, p.recv, p.recv_counts, ctx);
}

Tensor ExpertExchange::dispatch(const ExecCtx& ctx, const Tensor& rows) const {
  Pending p = start_dispatch(ctx, rows);
  return finish_dispatch(ctx, p);
}

quant::QTensor ExpertExchange::dispatch(const ExecCtx& ctx, const quant::QTensor& rows) const {
  Pending p = start_dispatch(ctx, rows);
  return finish_qdispatch(ctx, p);
}

void ExpertExchange::receive(const ExecCtx& ctx, int mark) const {
  SideQueue& side = side_queue(ctx.device, SideQueueUse::Experts);
  side.compute_waits_for(mark);
  side.reset();  // its markers are spent (one exchange is in flight at a time: the MoE layers run one by one)
}

ExpertExchange::Pending ExpertExchange::start_dispatch(const ExecCtx& ctx, const Tensor& rows) const {
  FP8T_CHECK(comm_ && rows.dim() == 2 && rows.size(0) == sent_ && rows.is_contiguous(),
             "expert dispatch: expected the {} dispatched rows as a contiguous [{}, dim] matrix, got {}", sent_, sent_,
             rows.str());
  const int64_t d = rows.size(1);
  Pending p;
  p.rows = Tensor::empty({received_, d}, rows.dtype(), MemCategory::Workspace, ctx.device);
  p.sent = {rows};
  SideQueue& side = side_queue(ctx.device, SideQueueUse::Experts);
  side.side_waits_for_compute();  // the rows are written, and the receive buffer's memory free
  exchange(ctx.with_stream(side.side_stream()), rows, p.rows, d, false);
  p.mark = side.side_mark();
  return p;
}

ExpertExchange::Pending ExpertExchange::start_dispatch(const ExecCtx& ctx, const quant::QTensor& rows) const {
  FP8T_CHECK(comm_ && rows.rowwise.defined() && rows.rows == sent_ && rows.groups == 1 &&
                 rows.rowwise.layout == quant::ScaleLayout::RowMajor && rows.spec.granularity.block_rows == 1 &&
                 !rows.spec.granularity.per_tensor && rows.rowwise.codes.numel() == sent_ * rows.cols,
             "expert dispatch: expected the {} dispatched rows row-wise quantized with row-major scales, got [{}, {}]",
             sent_, rows.rows, rows.cols);
  // row r's codes and its scales are row r of [rows, cols] and [rows, scale_cols()] (1×G tiles, row-major)
  const Tensor codes = rows.rowwise.codes.view({sent_, rows.cols});
  const Tensor scales = rows.rowwise.scales.view({sent_, rows.scale_cols()});
  Pending p;
  p.qrows = rows.rowwise_only();
  p.qrows.rows = received_;
  p.qrows.rowwise.codes = Tensor::empty({received_, codes.size(1)}, codes.dtype(), MemCategory::Workspace, ctx.device);
  p.qrows.rowwise.scales =
      Tensor::empty({received_, scales.size(1)}, scales.dtype(), MemCategory::Workspace, ctx.device);
  p.sent = {codes, scales};
  // codes and scales as one collective: the scales' small messages ride with the codes instead of paying a
  // second all-to-all's latency
  const Communicator::AllToAllvPart parts[2] = {part(codes, p.qrows.rowwise.codes, codes.size(1), false),
                                                part(scales, p.qrows.rowwise.scales, scales.size(1), false)};
  SideQueue& side = side_queue(ctx.device, SideQueueUse::Experts);
  side.side_waits_for_compute();
  comm_->all_to_allv_fused(parts, ctx.with_stream(side.side_stream()));
  p.mark = side.side_mark();
  return p;
}

Tensor ExpertExchange::finish_dispatch(const ExecCtx& ctx, Pending& p) const {
  FP8T_CHECK(p.rows.defined() && p.mark >= 0, "expert dispatch: finish_dispatch without a started dispatch of rows");
  receive(ctx, p.mark);
  const Tensor out = Tensor::empty({local_.rows, p.rows.size(1)}, p.rows.dtype(), MemCategory::Workspace, ctx.device);
  ops::moe_permute(ctx, p.rows, local_, out);
  p = {};  // the sent rows may be freed: the compute stream's later work comes after the exchange
  return out;
}

quant::QTensor ExpertExchange::finish_qdispatch(const ExecCtx& ctx, Pending& p) const {
  FP8T_CHECK(p.qrows.rowwise.defined() && p.mark >= 0,
             "expert dispatch: finish_qdispatch without a started dispatch of quantized rows");
  receive(ctx, p.mark);
  quant::QTensor out = ops::moe_permute(ctx, p.qrows, local_);
  p = {};
  return out;
}

Tensor ExpertExchange::combine(const ExecCtx& ctx, const Tensor& local) const {
  FP8T_CHECK(comm_ && local.dim() == 2 && local.size(0) == local_.rows,
             "expert combine: expected the local experts' [{}, dim] rows, got {}", local_.rows, local.str());
  const int64_t d = local.size(1);
  const Tensor back = Tensor::empty({received_, d}, local.dtype(), MemCategory::Workspace, ctx.device);
  ops::moe_permute_backward(ctx, local, local_, back, false);
  const Tensor out = Tensor::empty({sent_, d}, local.dtype(), MemCategory::Workspace, ctx.device);
  exchange(ctx, back, out, d, true);
  return out;
}

void ExpertExchange::set_category(MemCategory category) const {
  for (const Tensor* t : {&local_.expert_offsets, &local_.slot_token, &local_.choice_slot})
    if (t->defined()) t->storage().set_category(category);
}

}  // namespace fp8train::dist
