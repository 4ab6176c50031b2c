// Communicator: the collectives distributed training needs, over the ranks of one process group, on an ExecCtx.
//   all_reduce, reduce_scatter, all_gather(v), all_to_all(v), send/recv, broadcast, barrier, split.
// Tensors are contiguous and live on the communicator's device kind (CPU tensors for MPI and "self", CUDA tensors
// for NCCL); a GPU communicator enqueues its work on ctx.stream and returns (the stream orders it), a CPU one has
// finished when it returns. Counts and offsets are in elements; a "v" collective's blocks lie back to back in
// rank order (block r starts at the sum of the counts before it), and `send` may be this rank's own block of
// `recv` (in place).
// Reductions: F32, F64, I32, I64 (Sum, Max, Min). Data movement: every dtype (BF16, FP8 codes, ...).
// Implementations: SelfCommunicator (one rank: the non-distributed path goes through the same calls),
// MpiCommunicator (mpi_communicator.h: CPU ranks), NcclCommunicator (nccl_communicator.h: one rank per GPU).
// Timeouts: every blocking wait of the MPI and NCCL communicators is bounded (CommOptions::timeout_seconds); a
// rank that dies or never arrives makes the others stop with an error naming the group, the collective and this
// rank, instead of hanging (mpi_communicator.h says how).
// Traffic counters (stats()): the bytes this rank sends to and receives from other ranks in each call, counted as
// a bandwidth-optimal algorithm moves them whatever the library does inside: all_to_all(v), send/recv and
// all_gather(v) exactly (an all-gather sends this rank's block to each of the others once); reduce_scatter
// (N-1)/N of the input and all_reduce 2(N-1)/N of it (ring); broadcast the tensor once per receiving rank from
// the root (flat tree).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tensor/exec_ctx.h"
#include "tensor/tensor.h"

namespace fp8train::dist {

enum class ReduceOp : uint8_t { Sum, Max, Min };
const char* reduce_op_name(ReduceOp op);

struct CommOptions {
  // A blocking wait longer than this is a failure: a rank died, hangs, or never reached the collective.
  double timeout_seconds = 300.0;
};

struct CommStats {
  int64_t calls = 0;
  int64_t bytes_sent = 0;      // to other ranks (see the header comment for how collectives count)
  int64_t bytes_received = 0;  // from other ranks
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual std::string_view backend() const = 0;  // "self", "mpi", "nccl"
  // Whether a thread other than the one that made the communicator may call it, one thread at a time (ZeRO-1's
  // overlapped reduction on CPU ranks calls it from a worker thread).
  virtual bool callable_from_other_threads() const { return true; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  // The group's name in messages ("world", "dp", "ep", "pp").
  const std::string& name() const { return name_; }
  const CommOptions& options() const { return options_; }

  // recv = op over ranks of send (same numel; recv may be send).
  virtual void all_reduce(const Tensor& send, const Tensor& recv, ReduceOp op, const ExecCtx& ctx) = 0;
  // send holds size() blocks of recv.numel() elements; rank r receives op over ranks of block r.
  virtual void reduce_scatter(const Tensor& send, const Tensor& recv, ReduceOp op, const ExecCtx& ctx) = 0;
  // recv holds size() blocks of send.numel() elements: block r is rank r's send.
  virtual void all_gather(const Tensor& send, const Tensor& recv, const ExecCtx& ctx) = 0;
  // recv holds blocks of counts[r] elements back to back; send has counts[rank()] elements.
  virtual void all_gatherv(const Tensor& send, const Tensor& recv, std::span<const int64_t> counts,
                           const ExecCtx& ctx) = 0;
  // send and recv hold size() equal blocks: block j of send goes to rank j, block i of recv came from rank i.
  virtual void all_to_all(const Tensor& send, const Tensor& recv, const ExecCtx& ctx) = 0;
  // send_counts[j] elements go to rank j, recv_counts[i] come from rank i (blocks back to back, rank order).
  virtual void all_to_allv(const Tensor& send, std::span<const int64_t> send_counts, const Tensor& recv,
                           std::span<const int64_t> recv_counts, const ExecCtx& ctx) = 0;
  // Several all_to_allv exchanges as one collective, e.g. FP8 codes and their scales (every rank passes the same
  // number of parts, in the same order). Each part is an all_to_allv on its own; a GPU communicator issues them as
  // one group, so the exchange pays one collective's latency. The default runs them one after the other.
  struct AllToAllvPart {
    Tensor send;
    std::vector<int64_t> send_counts;
    Tensor recv;
    std::vector<int64_t> recv_counts;
  };
  virtual void all_to_allv_fused(std::span<const AllToAllvPart> parts, const ExecCtx& ctx);
  // Point to point (a matching recv/send on `peer`; messages between two ranks arrive in order).
  virtual void send(const Tensor& t, int peer, const ExecCtx& ctx) = 0;
  virtual void recv(const Tensor& t, int peer, const ExecCtx& ctx) = 0;
  // t on every rank becomes root's t.
  virtual void broadcast(const Tensor& t, int root, const ExecCtx& ctx) = 0;
  virtual void barrier() = 0;
  // Collective over this group: the ranks with the same color form a new group, ordered by key (then by rank).
  virtual std::unique_ptr<Communicator> split(int color, int key, const std::string& name) = 0;

  const CommStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

 protected:
  Communicator(int rank, int size, std::string name, CommOptions options);
  void count(int64_t sent, int64_t received) {
    ++stats_.calls;
    stats_.bytes_sent += sent;
    stats_.bytes_received += received;
  }
  // Shared argument checks (throw Error naming the collective and the problem).
  void check_tensor(const Tensor& t, const char* op, const char* what) const;
  void check_reducible(const Tensor& t, const char* op) const;
  void check_counts(std::span<const int64_t> counts, const char* op, const char* what) const;
  void check_peer(int peer, const char* op) const;
  // The bytes a collective moves, by the conventions in the header comment.
  int64_t ring_share(int64_t bytes) const { return size_ > 1 ? bytes * (size_ - 1) / size_ : 0; }

 private:
  int rank_, size_;
  std::string name_;
  CommOptions options_;
  CommStats stats_;
};

// A group of one rank: collectives copy (or do nothing); send/recv have no peer and throw. Any device.
class SelfCommunicator final : public Communicator {
 public:
  explicit SelfCommunicator(std::string name = "world", CommOptions options = {});
  std::string_view backend() const override { return "self"; }
  void all_reduce(const Tensor& send, const Tensor& recv, ReduceOp op, const ExecCtx& ctx) override;
  void reduce_scatter(const Tensor& send, const Tensor& recv, ReduceOp op, const ExecCtx& ctx) override;
  void all_gather(const Tensor& send, const Tensor& recv, const ExecCtx& ctx) override;
  void all_gatherv(const Tensor& send, const Tensor& recv, std::span<const int64_t> counts,
                   const ExecCtx& ctx) override;
  void all_to_all(const Tensor& send, const Tensor& recv, const ExecCtx& ctx) override;
  void all_to_allv(const Tensor& send, std::span<const int64_t> send_counts, const Tensor& recv,
                   std::span<const int64_t> recv_counts, const ExecCtx& ctx) override;
  void send(const Tensor& t, int peer, const ExecCtx& ctx) override;
  void recv(const Tensor& t, int peer, const ExecCtx& ctx) override;
  void broadcast(const Tensor& t, int root, const ExecCtx& ctx) override;
  void barrier() override {}
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override;
};

// Host-side helpers over any communicator (small values: losses, norms, counts). Every rank gets the same bits:
// the values are gathered and combined in rank order, never in an order that depends on timing.
// Σ over ranks of x, added in rank order.
double sum_in_rank_order(Communicator& comm, double x, const ExecCtx& ctx);
// Element-wise Σ over ranks, added in rank order (every rank passes the same length).
std::vector<double> sum_in_rank_order(Communicator& comm, const std::vector<double>& x, const ExecCtx& ctx);
// Whether any rank passed true.
bool any_rank(Communicator& comm, bool flag, const ExecCtx& ctx);

}  // namespace fp8train::dist
