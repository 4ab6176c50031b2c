// MPI communicator (see mpi_communicator.h). Without MPI in the build only the stubs at the end are compiled.
#include "dist/mpi_communicator.h"

#include <fmt/format.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"

#ifdef FP8TRAIN_HAVE_MPI
#include <mpi.h>

namespace fp8train::dist {
namespace {

using Clock = std::chrono::steady_clock;

// What this process waits in, for the timeout diagnosis: answered to pings from a rank that timed out.
struct WaitState {
  std::string op;  // empty: not waiting in a communicator call
};
WaitState g_wait;
MPI_Comm g_control = MPI_COMM_NULL;  // private duplicate of MPI_COMM_WORLD for pings
bool g_started = false;
// MPI's thread support as initialised: SERIALIZED lets ZeRO-1's worker thread make the calls of an overlapped
// gradient reduction while the main thread makes none.
int g_thread_level = MPI_THREAD_SINGLE;
constexpr int kPingTag = 1, kPongTag = 2;
constexpr int kMaxOpText = 256;

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  FP8T_FAIL("MPI call {} failed: {}", what, std::string(text, static_cast<size_t>(len)));
}

// Answers pings from ranks that timed out: "where are you?" -> the operation this rank waits in.
void answer_pings() {
  for (;;) {
    int flag = 0;
    MPI_Status status;
    MPI_Iprobe(MPI_ANY_SOURCE, kPingTag, g_control, &flag, &status);
    if (!flag) return;
    char dummy = 0;
    MPI_Recv(&dummy, 1, MPI_CHAR, status.MPI_SOURCE, kPingTag, g_control, MPI_STATUS_IGNORE);
    std::string text = g_wait.op.empty() ? std::string("(not waiting)") : g_wait.op;
    text.resize(kMaxOpText, '\0');
    MPI_Request req;
    MPI_Isend(text.data(), kMaxOpText, MPI_CHAR, status.MPI_SOURCE, kPongTag, g_control, &req);
    MPI_Request_free(&req);
  }
}

// Asks every other world rank where it is, for up to `seconds`; one line per rank.
std::string diagnose(double seconds) {
  int world = 0, me = 0;
  MPI_Comm_size(g_control, &world);
  MPI_Comm_rank(g_control, &me);
  std::vector<std::string> answers(static_cast<size_t>(world));
  std::vector<MPI_Request> recvs;
  std::vector<int> peers;
  std::vector<std::vector<char>> buffers(static_cast<size_t>(world), std::vector<char>(kMaxOpText));
  char ping = 1;
  for (int r = 0; r < world; ++r) {
    if (r == me) continue;
    MPI_Request s;
    MPI_Isend(&ping, 1, MPI_CHAR, r, kPingTag, g_control, &s);
    MPI_Request_free(&s);
    MPI_Request q;
    MPI_Irecv(buffers[static_cast<size_t>(r)].data(), kMaxOpText, MPI_CHAR, r, kPongTag, g_control, &q);
    recvs.push_back(q);
    peers.push_back(r);
  }
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  std::vector<bool> done(recvs.size(), false);
  while (Clock::now() < deadline) {
    answer_pings();
    bool all = true;
    for (size_t i = 0; i < recvs.size(); ++i) {
      if (done[i]) continue;
      int flag = 0;
      MPI_Test(&recvs[i], &flag, MPI_STATUS_IGNORE);
      if (flag) {
        done[i] = true;
        answers[static_cast<size_t>(peers[i])] = std::string(buffers[static_cast<size_t>(peers[i])].data());
      } else {
        all = false;
      }
    }
    if (all) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::vector<std::string> parts;
  for (size_t i = 0; i < peers.size(); ++i)
    parts.push_back(
        done[i] ? fmt::format("rank {} waits in {}", peers[i], answers[static_cast<size_t>(peers[i])])
                : fmt::format("rank {} does not answer (dead, hung, or busy outside the collectives)", peers[i]));
  return fmt::format("{}", fmt::join(parts, "; "));
}

MPI_Datatype mpi_type(DType d) {
  switch (d) {
    case DType::F32:
      return MPI_FLOAT;
    case DType::F64:
      return MPI_DOUBLE;
    case DType::BF16:
      return MPI_UINT16_T;
    case DType::U8:
      return MPI_UINT8_T;
    case DType::U16:
      return MPI_UINT16_T;
    case DType::I32:
      return MPI_INT32_T;
    case DType::I64:
      return MPI_INT64_T;
  }
  return MPI_BYTE;
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return MPI_SUM;
    case ReduceOp::Max:
      return MPI_MAX;
    case ReduceOp::Min:
      return MPI_MIN;
  }
  return MPI_SUM;
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, std::string name, CommOptions options)
      : Communicator(rank_of(comm), size_of(comm), std::move(name), options), comm_(comm) {}
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }
  std::string_view backend() const override { return "mpi"; }
  bool callable_from_other_threads() const override { return g_thread_level >= MPI_THREAD_SERIALIZED; }

  void all_reduce(const Tensor& send, const Tensor& recv, ReduceOp op, const ExecCtx&) override {
    const char* what = "all_reduce";
    check_host(send, what, "send");
    check_host(recv, what, "recv");
    check_reducible(send, what);
    same_kind(send, recv, send.numel(), what);
    const int n = int_count(send.numel(), what);
    MPI_Request req;
    check_mpi(MPI_Iallreduce(send.raw() == recv.raw() ? MPI_IN_PLACE : send.raw(), recv.raw(), n,
                             mpi_type(send.dtype()), mpi_op(op), comm_, &req),
              "MPI_Iallreduce");
    wait(req, fmt::format("all_reduce({}, {})", reduce_op_name(op), send.str()));
    const int64_t b = 2 * ring_share(static_cast<int64_t>(send.nbytes()));
    count(b, b);
  }

  void reduce_scatter(const Tensor& send, const Tensor& recv, ReduceOp op, const ExecCtx&) override {
    const char* what = "reduce_scatter";
    check_host(send, what, "send");
    check_host(recv, what, "recv");
    check_reducible(send, what);
    same_kind(send, recv, send.numel() / size(), what);
    FP8T_CHECK(send.numel() == recv.numel() * size(), "{} on group '{}': send {} is not {} blocks of recv {}", what,
               name(), send.str(), size(), recv.str());
    MPI_Request req;
    check_mpi(MPI_Ireduce_scatter_block(send.raw(), recv.raw(), int_count(recv.numel(), what), mpi_type(send.dtype()),
                                        mpi_op(op), comm_, &req),
              "MPI_Ireduce_scatter_block");
    wait(req, fmt::format("reduce_scatter({}, {})", reduce_op_name(op), send.str()));
    const int64_t b = ring_share(static_cast<int64_t>(send.nbytes()));
    count(b, b);
  }

  void all_gather(const Tensor& send, const Tensor& recv, const ExecCtx&) override {
    const char* what = "all_gather";
    check_host(send, what, "send");
    check_host(recv, what, "recv");
    same_kind(send, recv, recv.numel() / size(), what);
    FP8T_CHECK(recv.numel() == send.numel() * size(), "{} on group '{}': recv {} is not {} blocks of send {}", what,
               name(), recv.str(), size(), send.str());
    const bool in_place = static_cast<const char*>(send.raw()) ==
                          static_cast<const char*>(recv.raw()) + send.nbytes() * static_cast<size_t>(rank());
    MPI_Request req;
    const int n = int_count(send.numel(), what);
    check_mpi(MPI_Iallgather(in_place ? MPI_IN_PLACE : send.raw(), n, mpi_type(send.dtype()), recv.raw(), n,
                             mpi_type(recv.dtype()), comm_, &req),
              "MPI_Iallgather");
    wait(req, fmt::format("all_gather({})", send.str()));
    const int64_t b = static_cast<int64_t>(send.nbytes()) * (size() - 1);
    count(b, b);
  }

  void all_gatherv(const Tensor& send, const Tensor& recv, std::span<const int64_t> counts, const ExecCtx&) override {
    const char* what = "all_gatherv";
    check_host(send, what, "send");
    check_host(recv, what, "recv");
    check_counts(counts, what, "counts");
    FP8T_CHECK(send.dtype() == recv.dtype(), "{} on group '{}': send is {}, recv {}", what, name(),
               dtype_name(send.dtype()), dtype_name(recv.dtype()));
    std::vector<int> c, d;
    const int64_t all = displacements(counts, c, d, what);
    FP8T_CHECK(send.numel() == counts[static_cast<size_t>(rank())] && recv.numel() == all,
               "{} on group '{}': send {} / recv {} do not match counts (this rank {}, total {})", what, name(),
               send.str(), recv.str(), counts[static_cast<size_t>(rank())], all);
    const size_t es = dtype_size(send.dtype());
    const bool in_place =
        static_cast<const char*>(send.raw()) ==
        static_cast<const char*>(recv.raw()) + es * static_cast<size_t>(d[static_cast<size_t>(rank())]);
    MPI_Request req;
    check_mpi(
        MPI_Iallgatherv(in_place ? MPI_IN_PLACE : send.raw(), c[static_cast<size_t>(rank())], mpi_type(send.dtype()),
                        recv.raw(), c.data(), d.data(), mpi_type(recv.dtype()), comm_, &req),
        "MPI_Iallgatherv");
    wait(req, fmt::format("all_gatherv({} of {})", send.str(), recv.str()));
    const int64_t sent = static_cast<int64_t>(send.nbytes()) * (size() - 1);
    count(sent, static_cast<int64_t>(recv.nbytes() - send.nbytes()));
  }

  void all_to_all(const Tensor& send, const Tensor& recv, const ExecCtx&) override {
    const char* what = "all_to_all";
    check_host(send, what, "send");
    check_host(recv, what, "recv");
    same_kind(send, recv, send.numel(), what);
    FP8T_CHECK(send.numel() % size() == 0, "{} on group '{}': {} does not split into {} equal blocks", what, name(),
               send.str(), size());
    const int n = int_count(send.numel() / size(), what);
    MPI_Request req;
    check_mpi(MPI_Ialltoall(send.raw(), n, mpi_type(send.dtype()), recv.raw(), n, mpi_type(recv.dtype()), comm_, &req),
              "MPI_Ialltoall");
    wait(req, fmt::format("all_to_all({})", send.str()));
    const int64_t b = static_cast<int64_t>(send.nbytes()) / size() * (size() - 1);
    count(b, b);
  }

  void all_to_allv(const Tensor& send, std::span<const int64_t> send_counts, const Tensor& recv,
                   std::span<const int64_t> recv_counts, const ExecCtx&) override {
    const char* what = "all_to_allv";
    check_host(send, what, "send");
    check_host(recv, what, "recv");
    check_counts(send_counts, what, "send_counts");
    check_counts(recv_counts, what, "recv_counts");
    FP8T_CHECK(send.dtype() == recv.dtype(), "{} on group '{}': send is {}, recv {}", what, name(),
               dtype_name(send.dtype()), dtype_name(recv.dtype()));
    std::vector<int> sc, sd, rc, rd;
    const int64_t st = displacements(send_counts, sc, sd, what), rt = displacements(recv_counts, rc, rd, what);
    FP8T_CHECK(st == send.numel() && rt == recv.numel(),
               "{} on group '{}': the counts total {} to send and {} to receive, the tensors hold {} and {}", what,
               name(), st, rt, send.numel(), recv.numel());
    MPI_Request req;
    check_mpi(MPI_Ialltoallv(send.raw(), sc.data(), sd.data(), mpi_type(send.dtype()), recv.raw(), rc.data(), rd.data(),
                             mpi_type(recv.dtype()), comm_, &req),
              "MPI_Ialltoallv");
    wait(req, fmt::format("all_to_allv({} -> {})", send.str(), recv.str()));
    const int64_t es = static_cast<int64_t>(dtype_size(send.dtype()));
    const size_t me = static_cast<size_t>(rank());
    count((st - send_counts[me]) * es, (rt - recv_counts[me]) * es);
  }

  void send(const Tensor& t, int peer, const ExecCtx&) override {
    check_host(t, "send", "data");
    check_peer(peer, "send");
    MPI_Request req;
    check_mpi(MPI_Isend(t.raw(), int_count(t.numel(), "send"), mpi_type(t.dtype()), peer, 0, comm_, &req), "MPI_Isend");
    wait(req, fmt::format("send({} to rank {})", t.str(), peer));
    count(static_cast<int64_t>(t.nbytes()), 0);
  }

  void recv(const Tensor& t, int peer, const ExecCtx&) override {
    check_host(t, "recv", "data");
    check_peer(peer, "recv");
    MPI_Request req;
    check_mpi(MPI_Irecv(t.raw(), int_count(t.numel(), "recv"), mpi_type(t.dtype()), peer, 0, comm_, &req), "MPI_Irecv");
    wait(req, fmt::format("recv({} from rank {})", t.str(), peer));
    count(0, static_cast<int64_t>(t.nbytes()));
  }

  void broadcast(const Tensor& t, int root, const ExecCtx&) override {
    check_host(t, "broadcast", "data");
    FP8T_CHECK(root >= 0 && root < size(), "broadcast on group '{}': root {} is not one of its {} ranks", name(), root,
               size());
    MPI_Request req;
    check_mpi(MPI_Ibcast(t.raw(), int_count(t.numel(), "broadcast"), mpi_type(t.dtype()), root, comm_, &req),
              "MPI_Ibcast");
    wait(req, fmt::format("broadcast({} from rank {})", t.str(), root));
    const int64_t b = static_cast<int64_t>(t.nbytes());
    count(rank() == root ? b * (size() - 1) : 0, rank() == root ? 0 : b);
  }

  void barrier() override {
    MPI_Request req;
    check_mpi(MPI_Ibarrier(comm_, &req), "MPI_Ibarrier");
    wait(req, "barrier");
    count(0, 0);
  }

  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override {
    FP8T_CHECK(color >= 0, "split of group '{}': color {} must be non-negative", this->name(), color);
    // MPI_Comm_split has no nonblocking form: agree on the layout through a bounded all-gather first, so a missing
    // rank times out here rather than inside MPI_Comm_split.
    const Tensor mine =
        Tensor::from_vector(std::vector<int32_t>{color, key}, {2}, MemCategory::Workspace, Device::cpu());
    const Tensor all = Tensor::empty({2 * size()}, DType::I32, MemCategory::Workspace, Device::cpu());
    all_gather(mine, all, ExecCtx::cpu());
    MPI_Comm sub = MPI_COMM_NULL;
    check_mpi(MPI_Comm_split(comm_, color, key, &sub), "MPI_Comm_split");
    return std::make_unique<MpiCommunicator>(sub, name, options());
  }

 private:
  static int rank_of(MPI_Comm c) {
    int r = 0;
    MPI_Comm_rank(c, &r);
    return r;
  }
  static int size_of(MPI_Comm c) {
    int s = 0;
    MPI_Comm_size(c, &s);
    return s;
  }

  void check_host(const Tensor& t, const char* op, const char* what) const {
    check_tensor(t, op, what);
    FP8T_CHECK(t.device().is_cpu(), "{} on group '{}' (MPI): the {} tensor is on {}, MPI ranks exchange host tensors",
               op, name(), what, t.str());
  }
  void same_kind(const Tensor& a, const Tensor& b, int64_t, const char* op) const {
    FP8T_CHECK(a.dtype() == b.dtype(), "{} on group '{}': send is {}, recv {}", op, name(), dtype_name(a.dtype()),
               dtype_name(b.dtype()));
  }
  int int_count(int64_t n, const char* op) const {
    FP8T_CHECK(n <= INT_MAX, "{} on group '{}': {} elements exceed MPI's int count; split the transfer", op, name(), n);
    return static_cast<int>(n);
  }
  int64_t displacements(std::span<const int64_t> counts, std::vector<int>& c, std::vector<int>& d,
                        const char* op) const {
    int64_t at = 0;
    for (int64_t n : counts) {
      c.push_back(int_count(n, op));
      d.push_back(int_count(at, op));
      at += n;
    }
    return at;
  }

  // Completes `req`, or gives up at the deadline: diagnose, print, MPI_Abort.
  void wait(MPI_Request& req, const std::string& what) {
    const uint64_t seq = ++sequence_;
    const std::string op = fmt::format("{} #{} on group '{}'", what, seq, name());
    g_wait.op = op;
    const auto start = Clock::now();
    const auto deadline = start + std::chrono::duration<double>(options().timeout_seconds);
    int spins = 0;
    for (;;) {
      int flag = 0;
      check_mpi(MPI_Test(&req, &flag, MPI_STATUS_IGNORE), "MPI_Test");
      if (flag) break;
      answer_pings();
      if (Clock::now() > deadline) timed_out(op);
      // Spin briefly (fast collectives), then sleep: a waiting rank must not take the core of one still computing.
      if (++spins < 64)
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(spins < 1024 ? 50 : 500));
    }
    g_wait.op.clear();
  }

  [[noreturn]] void timed_out(const std::string& op) {
    int world_rank = 0, world_size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    std::fprintf(stderr, "fp8train: error: rank %d of %d: %s did not complete within %g s (collective timeout)\n",
                 world_rank, world_size, op.c_str(), options().timeout_seconds);
    std::fflush(stderr);
    const std::string where = diagnose(2.0);
    std::fprintf(stderr, "fp8train: error: rank %d of %d: %s; stopping every rank\n", world_rank, world_size,
                 where.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::_Exit(1);
  }

  MPI_Comm comm_;
  uint64_t sequence_ = 0;
};

}  // namespace

bool mpi_available() { return true; }

void mpi_init() {
  if (g_started) return;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
    g_thread_level = provided;
    std::atexit(finalize_at_exit);
  } else {
    MPI_Query_thread(&g_thread_level);
  }
  // Errors come back as return codes (turned into Error), not as MPI's default abort.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &g_control), "MPI_Comm_dup");
  g_started = true;
}

bool mpi_started() { return g_started; }

std::unique_ptr<Communicator> mpi_world(CommOptions options) {
  FP8T_CHECK(g_started, "mpi_world: MPI is not started (call mpi_init first)");
  MPI_Comm world = MPI_COMM_NULL;
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &world), "MPI_Comm_dup");
  return std::make_unique<MpiCommunicator>(world, "world", options);
}

}  // namespace fp8train::dist

#else  // no MPI in this build

namespace fp8train::dist {
bool mpi_available() { return false; }
void mpi_init() {
  FP8T_FAIL("this fp8train was built without MPI: install OpenMPI (libopenmpi-dev, openmpi-bin) and reconfigure");
}
bool mpi_started() { return false; }
std::unique_ptr<Communicator> mpi_world(CommOptions) {
  mpi_init();
  return nullptr;
}
}  // namespace fp8train::dist

#endif
