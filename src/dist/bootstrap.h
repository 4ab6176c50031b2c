// Launch detection and the world communicator.
//   mpirun / mpiexec (OpenMPI), or Slurm's srun with an MPI plugin: the MPI environment (OMPI_COMM_WORLD_*,
//     PMIX_RANK, PMI_RANK / PMI_SIZE) -> MPI starts; CPU ranks talk over MPI, GPU ranks over NCCL with the unique
//     id broadcast over MPI.
//   torchrun-style: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT (or srun without an MPI plugin:
//     SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, with MASTER_ADDR / MASTER_PORT) -> GPU ranks over NCCL, the unique
//     id handed out by a TcpStore that rank 0 serves on MASTER_ADDR:MASTER_PORT. CPU ranks need MPI (refused).
//   neither: one rank (SelfCommunicator).
#pragma once
#include <memory>
#include <string>

#include "dist/communicator.h"

namespace fp8train::dist {

struct LaunchEnv {
  std::string launcher = "single";  // "mpi", "torchrun", "slurm" or "single"
  int rank = 0, size = 1, local_rank = 0;
  std::string master_addr;  // torchrun / slurm
  int master_port = 0;
};

// Reads the environment (see above); throws Error naming a malformed variable.
LaunchEnv detect_launch();

// The GPU a rank of a multi-rank launch computes on, as the CUDA_VISIBLE_DEVICES value to set before CUDA starts
// (every GPU rank computes on its cuda:0): entry `local_rank` of the visible devices. `visible` is the current
// CUDA_VISIBLE_DEVICES (null: unset, every GPU visible -> the local rank's number). Returns "" to leave it as it
// is: one rank, or one device listed already (a launcher that binds a GPU per task). Throws Error when the node
// runs more ranks than the list has devices.
std::string local_rank_gpu(const LaunchEnv& launch, const char* visible);
// Applies local_rank_gpu to this process's environment once (call before any CUDA call; a no-op after the first).
void pin_local_gpu();

// The world of this launch: devices "cpu" or "cuda". Starts MPI when the launch is MPI's.
std::unique_ptr<Communicator> init_world(const std::string& device, CommOptions options);

// "rank R of N: " once a world of several ranks exists (for error lines), else "".
std::string rank_prefix();
// After an error on one rank of several: stops every rank (MPI_Abort) so none waits for this one; else nothing.
void abort_world(int code);

}  // namespace fp8train::dist
