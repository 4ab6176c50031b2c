// Process groups of a parallel layout dp × ep × pp = world size. World rank r has coordinates
//   ep_index = r mod ep,  dp_index = (r / ep) mod dp,  pp_index = r / (ep · dp)
// (expert parallelism innermost, so an EP group's heavy all-to-all stays on neighbouring ranks — one node — and
// pipeline stages outermost, so each stage is a contiguous block of ranks). The DP group of a rank holds the ranks
// that differ only in dp_index (they hold the same parameters and reduce gradients), the EP group those that differ
// only in ep_index, the PP group those that differ only in pp_index (the stages of one pipeline).
#pragma once
#include <memory>
#include <string>

#include "dist/communicator.h"

namespace fp8train::dist {

struct ParallelLayout {
  int dp = 1, ep = 1, pp = 1;
  int world() const { return dp * ep * pp; }
  std::string str() const;  // "dp 2 × ep 1 × pp 1"
};

struct ProcessGroups {
  ParallelLayout layout;
  Communicator* world = nullptr;  // not owned
  std::unique_ptr<Communicator> dp, ep, pp;
  int dp_index = 0, ep_index = 0, pp_index = 0;
};

// Splits `world` (collective over it). Throws Error when the layout does not multiply to the world size.
ProcessGroups make_process_groups(Communicator& world, const ParallelLayout& layout);

}  // namespace fp8train::dist
