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
// What training runs on, e.g. "CPU, 2 threads" or "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, ...)" (after the
// thread count is set and the device started).
std::string device_description();

// Starts the device a run computes on (device.cpp) and returns "cpu" or "cuda". `wanted`: "cpu"; "cuda" (the
// first GPU, which must be a Hopper: the CUDA kernels are built for sm_90a; it becomes the default device, so the
// model, its arenas and every tensor of a step live there); or "auto" (cuda when this build has CUDA and a
// Hopper GPU is visible, else cpu). Throws naming the reason when cuda is asked for and cannot be had.
std::string start_device(const std::string& wanted);
// Whether `auto` would choose cuda: this build has CUDA and a Hopper GPU is visible (starts nothing).
bool hopper_gpu_visible();
// The device start_device chose ("cpu" before any call).
const std::string& started_device();

}  // namespace fp8train::cli
