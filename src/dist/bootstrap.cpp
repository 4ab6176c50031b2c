// Launch detection and world creation (see bootstrap.h).
#include "dist/bootstrap.h"

#include <fmt/format.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "common/error.h"
#include "dist/mpi_communicator.h"
#include "dist/nccl_communicator.h"
#include "dist/tcp_store.h"

#ifdef FP8TRAIN_HAVE_MPI
#include <mpi.h>
#endif

namespace fp8train::dist {
namespace {

int g_world_rank = 0, g_world_size = 1;

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

int env_int(const char* name, int fallback) {
  const char* v = env(name);
  if (!v) return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  FP8T_CHECK(end && *end == '\0' && x >= 0 && x < (1L << 30),
             "environment variable {}='{}' is not a non-negative integer", name, v);
  return static_cast<int>(x);
}

}  // namespace

LaunchEnv detect_launch() {
  LaunchEnv e;
  if (env("OMPI_COMM_WORLD_SIZE") || env("PMIX_RANK") || env("PMI_RANK") || env("PMI_SIZE")) {
    e.launcher = "mpi";
    e.rank = env_int("OMPI_COMM_WORLD_RANK", env_int("PMIX_RANK", env_int("PMI_RANK", 0)));
    e.size = env_int("OMPI_COMM_WORLD_SIZE", env_int("PMI_SIZE", env_int("SLURM_NTASKS", 1)));
    e.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", env_int("SLURM_LOCALID", 0));
    return e;
  }
  const bool torchrun = env("WORLD_SIZE") != nullptr;
  const bool slurm = !torchrun && env("SLURM_PROCID") && env("SLURM_NTASKS") && env("MASTER_ADDR");
  if (!torchrun && !slurm) return e;
  e.launcher = torchrun ? "torchrun" : "slurm";
  e.rank = env_int(torchrun ? "RANK" : "SLURM_PROCID", -1);
  e.size = env_int(torchrun ? "WORLD_SIZE" : "SLURM_NTASKS", 1);
  e.local_rank = env_int(torchrun ? "LOCAL_RANK" : "SLURM_LOCALID", 0);
  FP8T_CHECK(e.size >= 1, "environment: WORLD_SIZE must be at least 1");
  FP8T_CHECK(e.rank >= 0 && e.rank < e.size, "environment: RANK={} is not a rank of WORLD_SIZE={} (set RANK to 0..{})",
             e.rank, e.size, e.size - 1);
  if (e.size > 1) {
    const char* addr = env("MASTER_ADDR");
    FP8T_CHECK(addr, "environment: WORLD_SIZE={} but MASTER_ADDR is not set (the host of rank 0)", e.size);
    e.master_addr = addr;
    e.master_port = env_int("MASTER_PORT", -1);
    FP8T_CHECK(e.master_port > 0 && e.master_port < 65536,
               "environment: MASTER_PORT must be set to a free TCP port on MASTER_ADDR (1..65535)");
  }
  return e;
}

std::string local_rank_gpu(const LaunchEnv& launch, const char* visible) {
  if (launch.size <= 1) return "";
  if (visible == nullptr) return std::to_string(launch.local_rank);
  std::vector<std::string> devices;
  std::string item;
  for (const char* c = visible;; ++c) {
    if (*c == ',' || *c == '\0') {
      if (!item.empty()) devices.push_back(item);
      item.clear();
      if (*c == '\0') break;
    } else if (*c != ' ') {
      item += *c;
    }
  }
  if (devices.size() <= 1) return "";
  FP8T_CHECK(launch.local_rank < static_cast<int>(devices.size()),
             "local rank {} has no GPU of its own: CUDA_VISIBLE_DEVICES='{}' lists {} devices for this node's ranks "
             "(launch at most one rank per GPU)",
             launch.local_rank, visible, devices.size());
  return devices[static_cast<size_t>(launch.local_rank)];
}

void pin_local_gpu() {
  static bool done = false;
  if (done) return;
  done = true;
  const std::string gpu = local_rank_gpu(detect_launch(), std::getenv("CUDA_VISIBLE_DEVICES"));  // "" lists none
  if (!gpu.empty()) setenv("CUDA_VISIBLE_DEVICES", gpu.c_str(), 1);
}

std::unique_ptr<Communicator> init_world(const std::string& device, CommOptions options) {
  FP8T_CHECK(device == "cpu" || device == "cuda", "init_world: device '{}' is not cpu or cuda", device);
  const LaunchEnv e = detect_launch();
  std::unique_ptr<Communicator> world;
  if (e.launcher == "mpi") {
    mpi_init();
    std::unique_ptr<Communicator> mpi = mpi_world(options);
    if (device == "cpu") {
      world = std::move(mpi);
    } else if (mpi->size() == 1) {
      // One GPU rank: nothing to talk to, and the MPI communicator takes host tensors only, while the trainer's
      // collectives pass device tensors; the self communicator takes both.
      world = std::make_unique<SelfCommunicator>("world", options);
    } else {
      // GPU ranks: NCCL, its unique id broadcast from rank 0 over MPI.
      std::string id = mpi->rank() == 0 ? nccl_unique_id() : std::string();
      Tensor bytes = Tensor::zeros({128}, DType::U8, MemCategory::Workspace, Device::cpu());
      if (mpi->rank() == 0) {
        FP8T_CHECK(id.size() == 128, "NCCL unique id has {} bytes, expected 128", id.size());
        std::copy(id.begin(), id.end(), bytes.data<uint8_t>());
      }
      mpi->broadcast(bytes, 0, ExecCtx::cpu());
      id.assign(reinterpret_cast<const char*>(bytes.data<uint8_t>()), 128);
      world = nccl_world(id, mpi->rank(), mpi->size(), options);
    }
  } else if (e.size > 1) {
    FP8T_CHECK(device == "cuda",
               "{} launch of {} ranks on the CPU: CPU ranks communicate over MPI, launch them with mpirun -np {} "
               "fp8train ... (the RANK / WORLD_SIZE environment is for GPU ranks over NCCL)",
               e.launcher, e.size, e.size);
    TcpStore store(e.master_addr, e.master_port, e.rank == 0, options.timeout_seconds);
    std::string id;
    if (e.rank == 0) {
      id = nccl_unique_id();
      store.set("nccl/world", id);
    }
    id = store.get("nccl/world");
    world = nccl_world(id, e.rank, e.size, options);
  } else {
    world = std::make_unique<SelfCommunicator>("world", options);
  }
  g_world_rank = world->rank();
  g_world_size = world->size();
  return world;
}

std::string rank_prefix() { return g_world_size > 1 ? fmt::format("rank {} of {}: ", g_world_rank, g_world_size) : ""; }

void abort_world(int code) {
#ifdef FP8TRAIN_HAVE_MPI
  if (mpi_started() && g_world_size > 1) MPI_Abort(MPI_COMM_WORLD, code);
#else
  (void)code;
#endif
}

}  // namespace fp8train::dist
