// Process groups (see groups.h).
#include "dist/groups.h"

#include <fmt/format.h>

#include "common/error.h"

namespace fp8train::dist {

std::string ParallelLayout::str() const { return fmt::format("dp {} x ep {} x pp {}", dp, ep, pp); }

ProcessGroups make_process_groups(Communicator& world, const ParallelLayout& layout) {
  FP8T_CHECK(layout.dp >= 1 && layout.ep >= 1 && layout.pp >= 1, "parallel layout {}: every degree must be at least 1",
             layout.str());
  FP8T_CHECK(layout.world() == world.size(),
             "parallel layout {} needs {} ranks, but {} were launched (set --dp, --ep and --pp so that dp x ep x pp = "
             "the number of ranks)",
             layout.str(), layout.world(), world.size());
  ProcessGroups g;
  g.layout = layout;
  g.world = &world;
  const int r = world.rank();
  g.ep_index = r % layout.ep;
  g.dp_index = (r / layout.ep) % layout.dp;
  g.pp_index = r / (layout.ep * layout.dp);
  g.dp = world.split(g.pp_index * layout.ep + g.ep_index, g.dp_index, "dp");
  g.ep = world.split(g.pp_index * layout.dp + g.dp_index, g.ep_index, "ep");
  g.pp = world.split(g.dp_index * layout.ep + g.ep_index, g.pp_index, "pp");
  return g;
}

}  // namespace fp8train::dist
