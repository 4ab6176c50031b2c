// Running the built `fp8train` CLI from the CLI tests (tests/tools, tests/cuda): its exit status and captured
// output, and the files a run leaves (whole files, JSON-lines rows).
#pragma once
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace fp8train::test {

struct CliResult {
  int exit_code = -1;  // -1: killed by a signal
  std::string out, err;
  std::vector<std::string> err_lines() const {
    std::vector<std::string> lines;
    std::istringstream in(err);
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    return lines;
  }
};

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline std::vector<nlohmann::json> jsonl(const std::filesystem::path& p) {
  std::vector<nlohmann::json> rows;
  std::istringstream in(slurp(p));
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) rows.push_back(nlohmann::json::parse(l));
  return rows;
}

// Runs `'cli' args` through the shell with `prefix` before it (e.g. "cd 'DIR' && " or "VAR=1 "), stdout and
// stderr captured in files under `scratch`.
inline CliResult run_cli(const std::string& cli, const std::string& args, const std::filesystem::path& scratch,
                         const std::string& prefix = "") {
  const std::filesystem::path out = scratch / "stdout.txt", err = scratch / "stderr.txt";
  const std::string cmd = prefix + "'" + cli + "' " + args + " > '" + out.string() + "' 2> '" + err.string() + "'";
  const int status = std::system(cmd.c_str());
  CliResult r;
  r.exit_code = status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

}  // namespace fp8train::test
