// NcclCommunicator: the Communicator of GPU ranks (one rank per GPU) over NCCL from the CUDA toolkit; built only
// with the CUDA backend and nccl.h (FP8TRAIN_HAVE_NCCL). Tensors are CUDA tensors; every call is enqueued on
// ctx.stream and returns. all_gatherv and all_to_allv are grouped point-to-point calls (NCCL has neither);
// reductions run in NCCL's own order (ring or tree: not rank order, so not bit-reproducible across world sizes).
// Timeouts: the communicator is created non-blocking; every call records an event on its stream, and a watchdog
// thread checks the oldest outstanding event against the deadline (CommOptions::timeout_seconds) and NCCL's
// asynchronous error: on either it prints one error naming the group, the call and this rank, aborts the
// communicator (ncclCommAbort, which releases the kernels waiting for the missing rank) and exits the process
// with status 1, so the launcher stops the job instead of every rank hanging.
#pragma once
#include <memory>
#include <string>

#include "dist/communicator.h"

namespace fp8train::dist {

// Whether this build has NCCL.
bool nccl_available();

// The NCCL unique id of a new world, as bytes (rank 0 makes it and hands it to the others: over MPI or a TcpStore).
std::string nccl_unique_id();

// This rank's communicator of a `size`-rank world from the id rank 0 made; the current CUDA device is this rank's.
std::unique_ptr<Communicator> nccl_world(const std::string& unique_id, int rank, int size, CommOptions options = {});

}  // namespace fp8train::dist
