// The Communicator base (argument checks), the one-rank communicator and the rank-ordered host helpers.
#include "dist/communicator.h"

#include "common/error.h"

namespace fp8train::dist {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Max:
      return "max";
    case ReduceOp::Min:
      return "min";
  }
  return "?";
}

Communicator::Communicator(int rank, int size, std::string name, CommOptions options)
    : rank_(rank), size_(size), name_(std::move(name)), options_(options) {
  FP8T_CHECK(size_ >= 1 && rank_ >= 0 && rank_ < size_, "communicator '{}': rank {} of {} is not a valid rank", name_,
             rank_, size_);
  FP8T_CHECK(options_.timeout_seconds > 0, "communicator '{}': the collective timeout must be positive, got {} s",
             name_, options_.timeout_seconds);
}

void Communicator::check_tensor(const Tensor& t, const char* op, const char* what) const {
  FP8T_CHECK(t.defined(), "{} on group '{}': the {} tensor is undefined", op, name_, what);
  FP8T_CHECK(t.is_contiguous(), "{} on group '{}': the {} tensor {} is not contiguous", op, name_, what, t.str());
}

void Communicator::check_reducible(const Tensor& t, const char* op) const {
  const DType d = t.dtype();
  FP8T_CHECK(d == DType::F32 || d == DType::F64 || d == DType::I32 || d == DType::I64,
             "{} on group '{}': cannot reduce {} tensors (reductions take f32, f64, i32 or i64)", op, name_,
             dtype_name(d));
}

void Communicator::check_counts(std::span<const int64_t> counts, const char* op, const char* what) const {
  FP8T_CHECK(counts.size() == static_cast<size_t>(size_), "{} on group '{}': {} has {} entries for {} ranks", op, name_,
             what, counts.size(), size_);
  for (int64_t c : counts) FP8T_CHECK(c >= 0, "{} on group '{}': {} holds the negative count {}", op, name_, what, c);
}

void Communicator::check_peer(int peer, const char* op) const {
  FP8T_CHECK(peer >= 0 && peer < size_ && peer != rank_,
             "{} on group '{}': peer {} is not another rank of this {}-rank group (this is rank {})", op, name_, peer,
             size_, rank_);
}

// ---- one rank ------------------------------------------------------------------------------------------------
namespace {
int64_t total(std::span<const int64_t> counts) {
  int64_t s = 0;
  for (int64_t c : counts) s += c;
  return s;
}

void copy_unless_same(const Tensor& src, const Tensor& dst, const char* op) {
  FP8T_CHECK(src.dtype() == dst.dtype() && src.numel() == dst.numel(),
             "{}: send {} and recv {} differ in dtype or size", op, src.str(), dst.str());
  if (src.raw() == dst.raw()) return;
  Tensor d = dst;
  d.copy_from(src);
}
}  // namespace

SelfCommunicator::SelfCommunicator(std::string name, CommOptions options)
    : Communicator(0, 1, std::move(name), options) {}

void SelfCommunicator::all_reduce(const Tensor& send, const Tensor& recv, ReduceOp, const ExecCtx&) {
  check_tensor(send, "all_reduce", "send");
  check_tensor(recv, "all_reduce", "recv");
  check_reducible(send, "all_reduce");
  copy_unless_same(send, recv, "all_reduce");
  count(0, 0);
}

void SelfCommunicator::reduce_scatter(const Tensor& send, const Tensor& recv, ReduceOp, const ExecCtx&) {
  check_tensor(send, "reduce_scatter", "send");
  check_tensor(recv, "reduce_scatter", "recv");
  check_reducible(send, "reduce_scatter");
  copy_unless_same(send, recv, "reduce_scatter");
  count(0, 0);
}

void SelfCommunicator::all_gather(const Tensor& send, const Tensor& recv, const ExecCtx&) {
  check_tensor(send, "all_gather", "send");
  check_tensor(recv, "all_gather", "recv");
  copy_unless_same(send, recv, "all_gather");
  count(0, 0);
}

void SelfCommunicator::all_gatherv(const Tensor& send, const Tensor& recv, std::span<const int64_t> counts,
                                   const ExecCtx&) {
  check_tensor(send, "all_gatherv", "send");
  check_tensor(recv, "all_gatherv", "recv");
  check_counts(counts, "all_gatherv", "counts");
  FP8T_CHECK(counts[0] == send.numel() && recv.numel() == counts[0],
             "all_gatherv on group '{}': counts [{}] do not match send {} and recv {}", name(), counts[0], send.str(),
             recv.str());
  copy_unless_same(send, recv, "all_gatherv");
  count(0, 0);
}

void SelfCommunicator::all_to_all(const Tensor& send, const Tensor& recv, const ExecCtx&) {
  check_tensor(send, "all_to_all", "send");
  check_tensor(recv, "all_to_all", "recv");
  copy_unless_same(send, recv, "all_to_all");
  count(0, 0);
}

void Communicator::all_to_allv_fused(std::span<const AllToAllvPart> parts, const ExecCtx& ctx) {
  for (const AllToAllvPart& p : parts) all_to_allv(p.send, p.send_counts, p.recv, p.recv_counts, ctx);
}

void SelfCommunicator::all_to_allv(const Tensor& send, std::span<const int64_t> send_counts, const Tensor& recv,
                                   std::span<const int64_t> recv_counts, const ExecCtx&) {
  check_tensor(send, "all_to_allv", "send");
  check_tensor(recv, "all_to_allv", "recv");
  check_counts(send_counts, "all_to_allv", "send_counts");
  check_counts(recv_counts, "all_to_allv", "recv_counts");
  FP8T_CHECK(
      send_counts[0] == recv_counts[0] && total(send_counts) == send.numel() && total(recv_counts) == recv.numel(),
      "all_to_allv on group '{}': counts do not match the tensors", name());
  copy_unless_same(send, recv, "all_to_allv");
  count(0, 0);
}

void SelfCommunicator::send(const Tensor&, int peer, const ExecCtx&) { check_peer(peer, "send"); }
void SelfCommunicator::recv(const Tensor&, int peer, const ExecCtx&) { check_peer(peer, "recv"); }

void SelfCommunicator::broadcast(const Tensor& t, int root, const ExecCtx&) {
  check_tensor(t, "broadcast", "data");
  FP8T_CHECK(root == 0, "broadcast on group '{}': root {} is not a rank of this one-rank group", name(), root);
  count(0, 0);
}

std::unique_ptr<Communicator> SelfCommunicator::split(int, int, const std::string& name) {
  return std::make_unique<SelfCommunicator>(name, options());
}

// ---- rank-ordered host helpers ---------------------------------------------------------------------------------
std::vector<double> sum_in_rank_order(Communicator& comm, const std::vector<double>& x, const ExecCtx& ctx) {
  const int64_t n = static_cast<int64_t>(x.size());
  if (n == 0) return {};
  const Tensor mine = Tensor::from_vector(x, {n}, MemCategory::Workspace, ctx.device);
  const Tensor all = ctx.scratch({comm.size() * n}, DType::F64);
  comm.all_gather(mine, all, ctx);
  ctx.synchronize();  // a GPU communicator only enqueued the gather
  const std::vector<double> v = all.to_vector<double>();
  std::vector<double> sum(x.size(), 0.0);
  for (int r = 0; r < comm.size(); ++r)
    for (int64_t i = 0; i < n; ++i) sum[static_cast<size_t>(i)] += v[static_cast<size_t>(r * n + i)];
  return sum;
}

double sum_in_rank_order(Communicator& comm, double x, const ExecCtx& ctx) {
  return sum_in_rank_order(comm, std::vector<double>{x}, ctx)[0];
}

bool any_rank(Communicator& comm, bool flag, const ExecCtx& ctx) {
  const Tensor t = Tensor::from_vector(std::vector<int32_t>{flag ? 1 : 0}, {1}, MemCategory::Workspace, ctx.device);
  comm.all_reduce(t, t, ReduceOp::Max, ctx);
  ctx.synchronize();
  return t.to_vector<int32_t>()[0] != 0;
}

}  // namespace fp8train::dist
