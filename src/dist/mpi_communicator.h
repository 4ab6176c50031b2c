// MpiCommunicator: the Communicator of CPU ranks over MPI (OpenMPI from Debian; built when CMake finds MPI, which
// defines FP8TRAIN_HAVE_MPI). Tensors are host tensors. Every operation is the nonblocking MPI call (MPI_Iallreduce,
// MPI_Ialltoallv, MPI_Isend, ...) completed by polling MPI_Test against a deadline (CommOptions::timeout_seconds),
// sleeping briefly between polls so that waiting ranks leave the cores to ranks still computing (CI oversubscribes
// two cores). When the deadline passes, the rank asks every other rank where it is (a ping on a private duplicate
// of MPI_COMM_WORLD that every waiting rank answers with the operation it waits in), prints one error naming the
// group, the operation, this rank and the ranks that did not answer or wait elsewhere, and calls MPI_Abort: mpirun
// then ends every rank, so a dead or hung rank never leaves the others waiting forever.
// MPI itself is started by mpi_init (bootstrap.h), once per process, with MPI_THREAD_FUNNELED.
#pragma once
#include <memory>

#include "dist/communicator.h"

namespace fp8train::dist {

// Whether this build has MPI (FP8TRAIN_HAVE_MPI).
bool mpi_available();

// Starts MPI (idempotent) and stops it at exit; throws Error when the build has no MPI.
void mpi_init();
// Whether mpi_init ran.
bool mpi_started();

// The world: every rank of MPI_COMM_WORLD (mpi_init first).
std::unique_ptr<Communicator> mpi_world(CommOptions options = {});

}  // namespace fp8train::dist
