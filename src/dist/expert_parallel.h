// Expert parallelism (EP) for a DeepSeekMoE layer: the routed experts sharded over the EP group, tokens moved to
// the ranks that own their experts and back, with only Communicator calls (so the MPI and the NCCL communicator
// serve it alike).
//
// Sharding: EP rank r of ep owns the contiguous block of experts [r·E/ep, (r+1)·E/ep) (E % ep == 0, checked).
// Every rank routes its own tokens over all E experts (the router is replicated) and builds an unpadded dispatch
// plan (ops/moe_dispatch.h, align 1): its N·K (token, choice) rows sorted by expert, then token — so the rows for
// each destination rank are one contiguous block. One forward's exchange (ExpertExchange) then:
//   1. counts: all_to_all of the per-expert counts (i32 [E]: block j = the counts for rank j's experts), so each
//      rank learns how many rows every source sends to each of its experts; all_gather of the per-expert totals
//      gives every rank the global loads (the router-bias update moves every rank's bias alike);
//   2. the local plan: the received rows (source-major, then expert, then token) re-ordered expert-major —
//      expert e's rows from source 0, then source 1, ... — padded to `align` (the grouped FP8 GEMM's 128-row
//      blocks). Because sources hold consecutive blocks of the global batch, this is exactly the layout one rank
//      would build for these experts over all ranks' tokens (same rows, same order, same padding), so the
//      expert GEMMs compute the same numbers as without EP;
//   3. dispatch: all_to_allv of the rows (the compute dtype, or FP8 codes + their power-of-two 1×128 scales as
//      one fused all_to_allv of two parts with the same row counts), then the local permute (padding rows zero);
//   4. combine: the local rows gathered back into received order and all_to_allv'd to their sources in the
//      compute dtype; the source then does the gate-weighted sum over its plan as without EP.
// Backward uses the same exchange: dy per (token, choice) dispatched like the tokens, dx combined back.
//
// Node-limited routing: with ranks_per_node EP ranks per node, the experts of one node are a contiguous block of
// E·ranks_per_node/ep experts; when that block is a whole number of the router's groups (n_group), the router's
// group-limited top-k (topk_group groups by the sum of the top-2 scores in each) sends each token to at most
// topk_group nodes — DeepSeek-V3's node-limited routing with M = topk_group (check_node_limited_routing).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "ops/moe_dispatch.h"
#include "quant/qtensor.h"

namespace fp8train::dist {

// The experts one EP rank owns.
struct ExpertShard {
  int64_t n_experts = 0;  // all routed experts (E)
  int ep = 1, rank = 0;
  int64_t local() const { return n_experts / ep; }
  int64_t first() const { return static_cast<int64_t>(rank) * local(); }
};
// Throws Error naming `what` unless n_experts is a positive multiple of ep.
ExpertShard expert_shard(int64_t n_experts, int ep, int rank, const std::string& what);

// Throws Error unless the layout makes the router's group-limited top-k a node-limited routing: ep a multiple of
// ranks_per_node, and the experts of one node (E·ranks_per_node/ep) a whole number of routing groups (E/n_group).
// ranks_per_node ≤ 0 or ≥ ep: one node, nothing to check.
void check_node_limited_routing(int64_t n_experts, int64_t n_group, int ep, int ranks_per_node);

// One forward's token exchange over the EP group (see the top of this file). Built collectively by every EP
// rank; kept for backward, which moves dy and dx over the same counts.
class ExpertExchange {
 public:
  ExpertExchange() = default;
  // expert_counts: i32 [E] on ctx's device, this rank's rows per expert (the router's expert_counts); align:
  // the local plan's padding (1 or 128).
  ExpertExchange(Communicator& ep, const ExpertShard& shard, const Tensor& expert_counts, int64_t align,
                 const ExecCtx& ctx);

  const ExpertShard& shard() const { return shard_; }
  // The expert-ordered layout of the received rows over the local experts (offsets [local() + 1]).
  const ops::MoePlan& local_plan() const { return local_; }
  // Rows every EP rank routed to each of the E experts (summed over the EP group).
  const std::vector<int64_t>& global_load() const { return load_; }
  int64_t sent_rows() const { return sent_; }
  int64_t received_rows() const { return received_; }

  // rows [sent_rows, d] in the unpadded dispatch plan's order -> [local_plan().rows, d].
  Tensor dispatch(const ExecCtx& ctx, const Tensor& rows) const;
  // The same for row-wise quantized rows (per-row 1×G tiles, row-major scales): codes and scales move together.
  quant::QTensor dispatch(const ExecCtx& ctx, const quant::QTensor& rows) const;
  // The dispatch in two halves, so that other work (the shared experts) runs on the compute stream while the rows
  // travel on a side queue (SideQueueUse::Experts): start_dispatch exchanges them there, after everything queued so
  // far on the compute stream, and returns at once; finish_dispatch makes the compute stream wait for the exchange
  // and permutes the received rows as dispatch() does. On the CPU the side queue is the calling thread, so this is
  // dispatch() in two calls. The results are dispatch()'s, bit for bit.
  struct Pending {
    std::vector<Tensor> sent;  // kept until the exchange has read them (finish_dispatch)
    Tensor rows;               // received, compute dtype
    quant::QTensor qrows;      // received, quantized
    int mark = -1;             // the side-queue marker after the exchange
  };
  Pending start_dispatch(const ExecCtx& ctx, const Tensor& rows) const;
  Pending start_dispatch(const ExecCtx& ctx, const quant::QTensor& rows) const;
  Tensor finish_dispatch(const ExecCtx& ctx, Pending& pending) const;
  quant::QTensor finish_qdispatch(const ExecCtx& ctx, Pending& pending) const;
  // local [local_plan().rows, d] -> [sent_rows, d] in the dispatch plan's order (padding rows dropped).
  Tensor combine(const ExecCtx& ctx, const Tensor& local) const;
  // Books the kept plan's tensors under `category` (what backward keeps).
  void set_category(MemCategory category) const;

 private:
  // The all_to_allv of rows of row_elems elements (back: the combine direction).
  Communicator::AllToAllvPart part(const Tensor& send, const Tensor& recv, int64_t row_elems, bool back) const;
  void exchange(const ExecCtx& ctx, const Tensor& send, const Tensor& recv, int64_t row_elems, bool back) const;
  // The compute stream waits for a started dispatch (its side-queue marker), whose markers are then recycled.
  void receive(const ExecCtx& ctx, int mark) const;

  Communicator* comm_ = nullptr;
  ExpertShard shard_;
  std::vector<int64_t> send_rows_, recv_rows_;  // rows to / from each EP rank
  int64_t sent_ = 0, received_ = 0;
  ops::MoePlan local_;
  std::vector<int64_t> load_;
};

}  // namespace fp8train::dist
