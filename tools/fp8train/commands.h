// Subcommand registry for the `fp8train` CLI. Each tools/fp8train/cmd_*.cpp defines a function that adds
// its subcommand(s) to the root CLI::App and registers it at static-initialisation time:
//   static const bool registered = fp8train::cli::register_command("numerics", 10, &add_numerics);
// `order` sorts the subcommands in --help. The callback set on a subcommand runs the command; it throws
// fp8train::Error on bad input, which main turns into one clear line and a non-zero exit.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <string>

namespace fp8train::cli {

using AddCommand = void (*)(CLI::App& root);
bool register_command(const std::string& name, int order, AddCommand add);

// Shared by train and compare (cmd_train.cpp):
// "runs/<name>-<date>-<time>", with "-2", "-3", ... appended when that folder exists (two runs in one second).
std::string fresh_run_dir(const std::string& name);
// What training runs on, e.g. "CPU, 2 threads" (after the thread count is set).
std::string device_description();

}  // namespace fp8train::cli
