// fp8train command line: `fp8train <subcommand> ...`. Subcommands live in cmd_*.cpp and register
// themselves (commands.h); main only assembles them and turns errors into one line and exit code 1:
// "fp8train: error: <one human sentence>". Where the failed check sits in the source is for developers: it is
// printed on a second line only when the environment sets FP8TRAIN_DEBUG (to anything but 0), and a training
// run also records it in its train.log.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <vector>

#include "commands.h"
#include "common/error.h"
#include "dist/bootstrap.h"

namespace fp8train::cli {
namespace {
struct Entry {
  std::string name;
  int order;
  AddCommand add;
};
std::vector<Entry>& registry() {
  static std::vector<Entry> entries;
  return entries;
}
}  // namespace

bool register_command(const std::string& name, int order, AddCommand add) {
  registry().push_back({name, order, add});
  return true;
}
}  // namespace fp8train::cli

int main(int argc, char** argv) {
  CLI::App app{"fp8train: DeepSeek-V3-style MoE training with fine-grained FP8, and an exact CPU numerics lab"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "fp8train 0.1.0");
  auto entries = fp8train::cli::registry();
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.order < b.order; });
  for (const auto& e : entries) e.add(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const fp8train::Error& e) {
    // In a distributed run the line names the rank, and every other rank is stopped rather than left waiting.
    std::fprintf(stderr, "fp8train: error: %s%s\n", fp8train::dist::rank_prefix().c_str(),
                 fp8train::printable_text(e.what()).c_str());
    const char* debug = std::getenv("FP8TRAIN_DEBUG");
    if (debug && *debug && std::strcmp(debug, "0") != 0 && !e.where().empty())
      std::fprintf(stderr, "fp8train: debug: %s\n", e.where().c_str());
    std::fflush(stderr);
    fp8train::dist::abort_world(1);
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fp8train: error: %s%s\n", fp8train::dist::rank_prefix().c_str(),
                 fp8train::printable_text(e.what()).c_str());
    std::fflush(stderr);
    fp8train::dist::abort_world(1);
    return 1;
  }
  return 0;
}
