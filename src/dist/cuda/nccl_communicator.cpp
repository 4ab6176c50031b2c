// NCCL communicator (see nccl_communicator.h). Compiled with the CUDA backend; without nccl.h only the stubs of
// nccl_stub.cpp exist.
#include "dist/nccl_communicator.h"

#ifdef FP8TRAIN_HAVE_NCCL
#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <thread>

#include "common/error.h"

namespace fp8train::dist {
namespace {

using Clock = std::chrono::steady_clock;

void check_cuda(cudaError_t rc, const char* what) {
  FP8T_CHECK(rc == cudaSuccess, "CUDA call {} failed: {}", what, cudaGetErrorString(rc));
}

ncclDataType_t nccl_type(DType d) {
  switch (d) {
    case DType::F32:
      return ncclFloat32;
    case DType::F64:
      return ncclFloat64;
    case DType::BF16:
      return ncclBfloat16;
    case DType::I32:
      return ncclInt32;
    case DType::I64:
      return ncclInt64;
    case DType::U8:
    case DType::U16:
      return ncclUint8;  // moved as bytes
  }
  return ncclUint8;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return ncclSum;
    case ReduceOp::Max:
      return ncclMax;
    case ReduceOp::Min:
      return ncclMin;
  }
  return ncclSum;
}

char* bytes_at(const Tensor& t, int64_t element) {
  return static_cast<char*>(t.raw()) + static_cast<size_t>(element) * dtype_size(t.dtype());
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int size, std::string name, CommOptions options)
      : Communicator(rank, size, std::move(name), options), comm_(comm) {
    check_cuda(cudaGetDevice(&device_), "cudaGetDevice");
    watchdog_ = std::thread([this] { watch(); });
  }
  ~NcclCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
    for (Pending& p : pending_) cudaEventDestroy(p.event);
    if (comm_) {
      // A non-blocking communicator finalizes in the background: wait for it (bounded) before destroying it.
      ncclResult_t rc = ncclCommFinalize(comm_);
      const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                               std::chrono::duration<double>(options().timeout_seconds));
      while (rc == ncclInProgress && Clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
        ncclCommGetAsyncError(comm_, &rc);
      }
      if (rc == ncclSuccess)
        ncclCommDestroy(comm_);
      else
        ncclCommAbort(comm_);
    }
  }
  std::string_view backend() const override { return "nccl"; }

  void all_reduce(const Tensor& send, const Tensor& recv, ReduceOp op, const ExecCtx& ctx) override {
    const char* what = "all_reduce";
    check_gpu(send, what, "send");
    check_gpu(recv, what, "recv");
    check_reducible(send, what);
    FP8T_CHECK(send.numel() == recv.numel() && send.dtype() == recv.dtype(), "{} on group '{}': send {} vs recv {}",
               what, name(), send.str(), recv.str());
    enqueue(ncclAllReduce(send.raw(), recv.raw(), static_cast<size_t>(send.numel()), nccl_type(send.dtype()),
                          nccl_op(op), comm_, stream(ctx)),
            ctx, fmt::format("all_reduce({})", send.str()));
    const int64_t b = 2 * ring_share(static_cast<int64_t>(send.nbytes()));
    count(b, b);
  }

  void reduce_scatter(const Tensor& send, const Tensor& recv, ReduceOp op, const ExecCtx& ctx) override {
    const char* what = "reduce_scatter";
    check_gpu(send, what, "send");
    check_gpu(recv, what, "recv");
    check_reducible(send, what);
    FP8T_CHECK(send.numel() == recv.numel() * size() && send.dtype() == recv.dtype(),
               "{} on group '{}': send {} is not {} blocks of recv {}", what, name(), send.str(), size(), recv.str());
    enqueue(ncclReduceScatter(send.raw(), recv.raw(), static_cast<size_t>(recv.numel()), nccl_type(send.dtype()),
                              nccl_op(op), comm_, stream(ctx)),
            ctx, fmt::format("reduce_scatter({})", send.str()));
    const int64_t b = ring_share(static_cast<int64_t>(send.nbytes()));
    count(b, b);
  }

  void all_gather(const Tensor& send, const Tensor& recv, const ExecCtx& ctx) override {
    const char* what = "all_gather";
    check_gpu(send, what, "send");
    check_gpu(recv, what, "recv");
    FP8T_CHECK(recv.numel() == send.numel() * size() && send.dtype() == recv.dtype(),
               "{} on group '{}': recv {} is not {} blocks of send {}", what, name(), recv.str(), size(), send.str());
    enqueue(ncclAllGather(send.raw(), recv.raw(), send.nbytes(), ncclUint8, comm_, stream(ctx)), ctx,
            fmt::format("all_gather({})", send.str()));
    const int64_t b = static_cast<int64_t>(send.nbytes()) * (size() - 1);
    count(b, b);
  }

  void all_gatherv(const Tensor& send, const Tensor& recv, std::span<const int64_t> counts,
                   const ExecCtx& ctx) override {
    const char* what = "all_gatherv";
    check_gpu(send, what, "send");
    check_gpu(recv, what, "recv");
    check_counts(counts, what, "counts");
    int64_t at = 0;
    std::vector<int64_t> offsets;
    for (int64_t c : counts) offsets.push_back(at), at += c;
    FP8T_CHECK(
        send.dtype() == recv.dtype() && send.numel() == counts[static_cast<size_t>(rank())] && recv.numel() == at,
        "{} on group '{}': send {} / recv {} do not match the counts", what, name(), send.str(), recv.str());
    const size_t es = dtype_size(send.dtype());
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    for (int r = 0; r < size(); ++r) {
      char* dst = bytes_at(recv, offsets[static_cast<size_t>(r)]);
      const void* src = r == rank() ? send.raw() : dst;
      check_nccl(ncclBroadcast(src, dst, static_cast<size_t>(counts[static_cast<size_t>(r)]) * es, ncclUint8, r, comm_,
                               stream(ctx)),
                 "ncclBroadcast");
    }
    enqueue(ncclGroupEnd(), ctx, fmt::format("all_gatherv({} of {})", send.str(), recv.str()));
    count(static_cast<int64_t>(send.nbytes()) * (size() - 1), static_cast<int64_t>(recv.nbytes() - send.nbytes()));
  }

  void all_to_all(const Tensor& send, const Tensor& recv, const ExecCtx& ctx) override {
    FP8T_CHECK(send.numel() % size() == 0, "all_to_all on group '{}': {} does not split into {} equal blocks", name(),
               send.str(), size());
    const std::vector<int64_t> counts(static_cast<size_t>(size()), send.numel() / size());
    all_to_allv(send, counts, recv, counts, ctx);
  }

  void all_to_allv(const Tensor& send, std::span<const int64_t> send_counts, const Tensor& recv,
                   std::span<const int64_t> recv_counts, const ExecCtx& ctx) override {
    const AllToAllvPart part{
        send, {send_counts.begin(), send_counts.end()}, recv, {recv_counts.begin(), recv_counts.end()}};
    all_to_allv_fused(std::span<const AllToAllvPart>(&part, 1), ctx);
  }

  // Every part's sends and receives in one NCCL group, then each part's own block copied locally.
  void all_to_allv_fused(std::span<const AllToAllvPart> parts, const ExecCtx& ctx) override {
    const char* what = "all_to_allv";
    const size_t me = static_cast<size_t>(rank());
    struct Local {
      char* dst;
      const char* src;
      size_t bytes;
    };
    std::vector<Local> local;
    int64_t sent = 0, received = 0;
    std::string names;
    for (const AllToAllvPart& p : parts) {
      check_gpu(p.send, what, "send");
      check_gpu(p.recv, what, "recv");
      check_counts(p.send_counts, what, "send_counts");
      check_counts(p.recv_counts, what, "recv_counts");
      int64_t st = 0, rt = 0;
      for (int64_t c : p.send_counts) st += c;
      for (int64_t c : p.recv_counts) rt += c;
      FP8T_CHECK(p.send.dtype() == p.recv.dtype() && st == p.send.numel() && rt == p.recv.numel(),
                 "{} on group '{}': the counts do not match send {} and recv {}", what, name(), p.send.str(),
                 p.recv.str());
      FP8T_CHECK(p.send_counts[me] == p.recv_counts[me],
                 "{} on group '{}': rank {} sends itself {} elements but expects {}", what, name(), rank(),
                 p.send_counts[me], p.recv_counts[me]);
      const size_t es = dtype_size(p.send.dtype());
      sent += (st - p.send_counts[me]) * static_cast<int64_t>(es);
      received += (rt - p.recv_counts[me]) * static_cast<int64_t>(es);
      names += fmt::format("{}{} -> {}", names.empty() ? "" : ", ", p.send.str(), p.recv.str());
    }
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    for (const AllToAllvPart& p : parts) {
      const size_t es = dtype_size(p.send.dtype());
      int64_t so = 0, ro = 0;
      for (int r = 0; r < size(); ++r) {
        const size_t i = static_cast<size_t>(r);
        if (r == rank()) {
          if (p.send_counts[i] > 0)
            local.push_back({bytes_at(p.recv, ro), bytes_at(p.send, so), static_cast<size_t>(p.send_counts[i]) * es});
        } else {
          if (p.send_counts[i] > 0)
            check_nccl(ncclSend(bytes_at(p.send, so), static_cast<size_t>(p.send_counts[i]) * es, ncclUint8, r, comm_,
                                stream(ctx)),
                       "ncclSend");
          if (p.recv_counts[i] > 0)
            check_nccl(ncclRecv(bytes_at(p.recv, ro), static_cast<size_t>(p.recv_counts[i]) * es, ncclUint8, r, comm_,
                                stream(ctx)),
                       "ncclRecv");
        }
        so += p.send_counts[i];
        ro += p.recv_counts[i];
      }
    }
    enqueue(ncclGroupEnd(), ctx, fmt::format("all_to_allv({})", names));
    for (const Local& l : local)
      check_cuda(cudaMemcpyAsync(l.dst, l.src, l.bytes, cudaMemcpyDeviceToDevice, stream(ctx)), "cudaMemcpyAsync");
    count(sent, received);
  }

  void send(const Tensor& t, int peer, const ExecCtx& ctx) override {
    check_gpu(t, "send", "data");
    check_peer(peer, "send");
    enqueue(ncclSend(t.raw(), t.nbytes(), ncclUint8, peer, comm_, stream(ctx)), ctx,
            fmt::format("send({} to rank {})", t.str(), peer));
    count(static_cast<int64_t>(t.nbytes()), 0);
  }

  void recv(const Tensor& t, int peer, const ExecCtx& ctx) override {
    check_gpu(t, "recv", "data");
    check_peer(peer, "recv");
    enqueue(ncclRecv(t.raw(), t.nbytes(), ncclUint8, peer, comm_, stream(ctx)), ctx,
            fmt::format("recv({} from rank {})", t.str(), peer));
    count(0, static_cast<int64_t>(t.nbytes()));
  }

  void broadcast(const Tensor& t, int root, const ExecCtx& ctx) override {
    check_gpu(t, "broadcast", "data");
    FP8T_CHECK(root >= 0 && root < size(), "broadcast on group '{}': root {} is not one of its {} ranks", name(), root,
               size());
    enqueue(ncclBroadcast(t.raw(), t.raw(), t.nbytes(), ncclUint8, root, comm_, stream(ctx)), ctx,
            fmt::format("broadcast({} from rank {})", t.str(), root));
    const int64_t b = static_cast<int64_t>(t.nbytes());
    count(rank() == root ? b * (size() - 1) : 0, rank() == root ? 0 : b);
  }

  void barrier() override {
    // NCCL has no barrier: an all-reduce of one value on a private stream, waited for (bounded by the watchdog).
    const Tensor one = Tensor::zeros({1}, DType::I32, MemCategory::Workspace, Device::cuda(device_));
    ExecCtx ctx = ExecCtx::on(Device::cuda(device_));
    all_reduce(one, one, ReduceOp::Sum, ctx);
    ctx.synchronize();
  }

  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override {
    // With a non-blocking parent the split completes like a collective of the parent: the new handle is filled
    // in only once the parent's state leaves ncclInProgress (NVIDIA/nccl#1472), so poll the parent, then the child.
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t sub = nullptr;
    ncclResult_t rc = ncclCommSplit(comm_, color, key, &sub, &config);
    const std::string what = fmt::format("split into '{}'", name);
    if (rc == ncclSuccess || rc == ncclInProgress) ncclCommGetAsyncError(comm_, &rc);
    wait_ready(comm_, rc, what, options(), rank(), this->name());
    FP8T_CHECK(sub != nullptr, "rank {}: NCCL split of group '{}' into '{}' returned no communicator", rank(),
               this->name(), name);
    ncclCommGetAsyncError(sub, &rc);
    wait_ready(sub, rc, what, options(), rank(), this->name());
    int r = 0, n = 0;
    check_nccl(ncclCommUserRank(sub, &r), "ncclCommUserRank");
    check_nccl(ncclCommCount(sub, &n), "ncclCommCount");
    return std::make_unique<NcclCommunicator>(sub, r, n, name, options());
  }

  // Waits for a non-blocking NCCL call to finish enqueueing (or initialising), bounded by the timeout.
  void complete(ncclResult_t rc, const std::string& what) { wait_ready(comm_, rc, what, options(), rank(), name()); }

  static void wait_ready(ncclComm_t comm, ncclResult_t rc, const std::string& what, const CommOptions& options,
                         int rank, const std::string& group) {
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(options.timeout_seconds));
    while (rc == ncclInProgress) {
      if (Clock::now() > deadline) {
        std::fprintf(stderr, "fp8train: error: rank %d: NCCL %s on group '%s' did not complete within %g s\n", rank,
                     what.c_str(), group.c_str(), options.timeout_seconds);
        ncclCommAbort(comm);
        std::_Exit(1);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      ncclCommGetAsyncError(comm, &rc);
    }
    FP8T_CHECK(rc == ncclSuccess, "rank {}: NCCL {} on group '{}' failed: {}", rank, what, group,
               ncclGetErrorString(rc));
  }

 private:
  struct Pending {
    cudaEvent_t event;
    Clock::time_point deadline;
    std::string what;
  };

  static cudaStream_t stream(const ExecCtx& ctx) { return static_cast<cudaStream_t>(ctx.stream); }

  void check_nccl(ncclResult_t rc, const char* what) {
    if (rc == ncclInProgress) return;  // non-blocking communicator: the group end waits
    FP8T_CHECK(rc == ncclSuccess, "NCCL call {} on group '{}' failed: {}", what, name(), ncclGetErrorString(rc));
  }

  void check_gpu(const Tensor& t, const char* op, const char* what) const {
    check_tensor(t, op, what);
    FP8T_CHECK(!t.device().is_cpu(), "{} on group '{}' (NCCL): the {} tensor {} is not on a GPU", op, name(), what,
               t.str());
  }

  // Finishes enqueueing a call and hands its completion to the watchdog.
  void enqueue(ncclResult_t rc, const ExecCtx& ctx, std::string what) {
    what = fmt::format("{} #{} on group '{}'", what, ++sequence_, name());
    complete(rc, what);
    cudaEvent_t event;
    check_cuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    check_cuda(cudaEventRecord(event, stream(ctx)), "cudaEventRecord");
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const auto timeout =
          std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options().timeout_seconds));
      pending_.push_back(Pending{event, Clock::now() + timeout, std::move(what)});
    }
    cv_.notify_all();
  }

  // The watchdog: retires finished calls in order; a call past its deadline, or an asynchronous NCCL error, ends
  // the process (see the header).
  void watch() {
    cudaSetDevice(device_);
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_) {
      if (pending_.empty()) {
        cv_.wait_for(lock, std::chrono::milliseconds(100));
        continue;
      }
      Pending& p = pending_.front();
      const cudaError_t q = cudaEventQuery(p.event);
      if (q == cudaSuccess) {
        cudaEventDestroy(p.event);
        pending_.pop_front();
        continue;
      }
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      const bool late = Clock::now() > p.deadline;
      if (late || (async != ncclSuccess && async != ncclInProgress) || (q != cudaErrorNotReady)) {
        std::fprintf(
            stderr, "fp8train: error: rank %d of group '%s': NCCL %s %s; aborting this rank\n", rank(), name().c_str(),
            p.what.c_str(),
            late ? fmt::format("did not complete within {} s (a rank died, hangs or never reached it)",
                               options().timeout_seconds)
                       .c_str()
                 : fmt::format("failed: {}", async != ncclSuccess ? ncclGetErrorString(async) : cudaGetErrorString(q))
                       .c_str());
        std::fflush(stderr);
        ncclCommAbort(comm_);
        std::_Exit(1);
      }
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      lock.lock();
    }
  }

  ncclComm_t comm_;
  int device_ = 0;
  uint64_t sequence_ = 0;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Pending> pending_;
  bool stop_ = false;
  std::thread watchdog_;
};

}  // namespace

bool nccl_available() { return true; }

std::string nccl_unique_id() {
  ncclUniqueId id;
  const ncclResult_t rc = ncclGetUniqueId(&id);
  FP8T_CHECK(rc == ncclSuccess, "ncclGetUniqueId failed: {}", ncclGetErrorString(rc));
  return std::string(id.internal, sizeof id.internal);
}

std::unique_ptr<Communicator> nccl_world(const std::string& unique_id, int rank, int size, CommOptions options) {
  ncclUniqueId id;
  FP8T_CHECK(unique_id.size() == sizeof id.internal, "NCCL unique id has {} bytes, expected {}", unique_id.size(),
             sizeof id.internal);
  std::copy(unique_id.begin(), unique_id.end(), id.internal);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  const ncclResult_t rc = ncclCommInitRankConfig(&comm, size, id, rank, &config);
  NcclCommunicator::wait_ready(comm, rc, "initialisation", options, rank, "world");
  return std::make_unique<NcclCommunicator>(comm, rank, size, "world", options);
}

}  // namespace fp8train::dist
#endif
