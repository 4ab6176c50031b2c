// DualPipeV pipeline parallelism: the schedule, a checker and a timing simulator (no tensors; pipeline_executor.h
// runs a schedule on real stages).
//
// Layout. A pipeline of P ranks (the PP group) cuts the model into 2P stages laid out as a V: rank r holds chunk 0
// = stage r (the first half, micro-batches going down the ranks) and chunk 1 = stage 2P−1−r (the second half,
// coming back up). Rank 0 holds the first and the last stage (it reads the input and computes the loss); rank P−1
// holds the two middle stages, so a micro-batch turns around there without leaving the rank.
//
// Schedule (DeepSeek-V3 report §3.2.1; the "cut-in-half" DualPipeV variant). Every micro-batch enters at rank 0.
// Backward is split into B (backward for the stage's input, what the previous stage waits for) and W (backward
// for its weights, which nobody waits for). Rank r of P, M ≥ 2P micro-batches, F0/F1 forward of chunk 0/1, B0/B1
// and W0/W1 likewise; each kind runs its micro-batches in increasing order:
//   1. warm-up: 2(P−r−1) × F0
//   2. (r+1) × (F0, F1)
//   3. (P−r−1) × (B1, W1, F1)
//   4. steady: (M−2P+r+1) × (F0&B1, F1&B0), each "&" one overlapped forward/backward pair whose backward is full
//      (B and W); on the last rank the very first pair runs as F0 then B1 W1 (its B1 needs that F0's output)
//   5. (P−r−1) × (B1 W1, F1&B0)
//   6. (r+1) × (B1, B0): the first half of these backwards full (B W), the second half B only, their W deferred
//   7. (P−r−1) × (W of the oldest deferred, B0 with its W deferred)
//   8. the deferred W, oldest first.
// Transfers (Send/Recv actions) are placed by a rendezvous-safe rule: the schedule is simulated once with unit
// times, every message gets the time its tensor is produced, and each rank performs its sends and receives in the
// order of those times (ties broken the same way on every rank), a receive before any computation that starts at
// or after its time. Then the smallest outstanding message always has both its ranks waiting at it, so blocking
// send/recv (Communicator::send/recv, which may wait for the receiver) never deadlock, whatever the real timings.
//
// Times (ChunkTimes) follow DeepSeek's bubble table: F a forward chunk, B a FULL backward chunk (input and
// weights), W the weights part of it (so B alone costs B−W), F&B an overlapped forward + full backward pair.
// The table gives DualPipeV's bubble as (PP/2−1)(F&B+B−3W) with PP the number of pipeline STAGES (the V puts two
// stages on each of PP/2 devices); simulate() measures each rank's idle time for comparison (docs/distributed.md).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace fp8train::dist {

// Rank r's chunk c (0 or 1) is stage dualpipev_stage(r, c, P); stage s lives on rank dualpipev_rank(s, P).
int dualpipev_stage(int rank, int chunk, int ranks);
int dualpipev_rank(int stage, int ranks);
int dualpipev_chunk(int stage, int ranks);

enum class PipeOp : uint8_t {
  F,     // forward of (chunk, mb)
  B,     // backward for the input of (chunk, mb)
  W,     // backward for the weights of (chunk, mb)
  FB,    // forward of (chunk, mb) overlapped with the full backward (B and W) of (chunk2, mb2)
  Send,  // tensor to peer
  Recv,  // tensor from peer
};

// What a Send/Recv carries: the forward output of `stage` (the input of stage + 1), or the gradient of the input
// of `stage` (the gradient of stage − 1's output).
enum class Payload : uint8_t { Activation, Gradient };

struct PipeAction {
  PipeOp op = PipeOp::F;
  int chunk = 0, mb = 0;    // F, B, W, FB (its forward)
  int chunk2 = 0, mb2 = 0;  // FB: the backward
  // Send / Recv:
  Payload payload = Payload::Activation;
  int stage = 0;  // the stage that produced the tensor
  int peer = -1;  // the other rank (PP group rank)

  static PipeAction f(int chunk, int mb) { return {PipeOp::F, chunk, mb}; }
  static PipeAction b(int chunk, int mb) { return {PipeOp::B, chunk, mb}; }
  static PipeAction w(int chunk, int mb) { return {PipeOp::W, chunk, mb}; }
  static PipeAction fb(int fchunk, int fmb, int bchunk, int bmb) { return {PipeOp::FB, fchunk, fmb, bchunk, bmb}; }
  bool is_transfer() const { return op == PipeOp::Send || op == PipeOp::Recv; }
  std::string str() const;  // "F0(3)", "F1(2)&B0(1)", "send act 4 mb 2 -> 1", ...
};

struct PipeSchedule {
  int ranks = 0, micro_batches = 0;
  std::vector<std::vector<PipeAction>> actions;  // per rank, in order
};

// The DualPipeV schedule with transfers. Throws Error when ranks < 2 or micro_batches < 2·ranks.
PipeSchedule dualpipev_schedule(int ranks, int micro_batches);
// The same without Send/Recv actions (the computation order of each rank).
PipeSchedule dualpipev_compute_order(int ranks, int micro_batches);

// Throws Error naming the first problem: a (stage, mb) without exactly one F, one B and one W, or on the wrong
// rank; a computation before its inputs (on its rank, or received); a transfer that does not match its peer's;
// or a deadlock when every Send/Recv blocks until its peer reaches the matching one.
void check_schedule(const PipeSchedule& schedule);

struct ChunkTimes {
  double f = 1, b = 2, w = 1;  // b: full backward (input + weights); b ≥ w
  double fb = -1;              // overlapped forward + full backward, ≥ max(f, b); < 0: f + b (no gain from overlap)
  double overlapped() const { return fb < 0 ? f + b : fb; }
  void validate() const;  // throws Error on f ≤ 0, w < 0, b ≤ w, fb < max(f, b), non-finite times
};

struct PipeSpan {
  double start = 0, end = 0;
  PipeAction action;  // a computation (F, B, W, FB)
};

struct PipeSimulation {
  std::vector<std::vector<PipeSpan>> spans;  // per rank, in order
  double makespan = 0;                       // first start to last end over all ranks
  std::vector<double> busy;                  // per rank: time computing
  std::vector<double> bubble;                // per rank: makespan − busy
  double max_bubble() const;
};

// Runs each rank's computations in order, each as soon as its rank is free and its inputs exist (transfers take
// no time). Throws Error when some rank can never go on (a dependency cycle).
PipeSimulation simulate(const PipeSchedule& schedule, const ChunkTimes& times);
// The same with each rank's own chunk times (rank_times[r], both of its stages): stages that cost differently.
PipeSimulation simulate(const PipeSchedule& schedule, const std::vector<ChunkTimes>& rank_times);

// DeepSeek's table: (S/2 − 1)(F&B + B − 3W) with S = the number of stages (2 × ranks for DualPipeV).
double dualpipev_bubble_formula(int stages, const ChunkTimes& times);

// The per-rank timeline as text, one cell per time unit (times must be whole numbers): two lines per rank, the
// actions' letters (F, B, W; upper case chunk 0, lower case chunk 1; an F&B pair shows its forward's letter then
// its backward's; '.' idle) and under them the micro-batch of each cell (0-9, then a-z).
std::string render_timeline(const PipeSimulation& sim, const ChunkTimes& times);

}  // namespace fp8train::dist
