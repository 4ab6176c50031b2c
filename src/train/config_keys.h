// The config key registry shared by config.cpp (train/optim/data keys) and config_model.cpp (model keys):
// one entry per key with its dotted name, flag, type, range or choices, and a reference into TrainConfig.
#pragma once
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "train/config.h"

namespace fp8train::train::detail {

using ValueRef = std::variant<int64_t*, int*, double*, std::string*, bool*>;

struct ConfigKey {
  std::string key;    // "optim.lr"
  std::string flag;   // "lr" (the CLI flag without "--")
  double min = 0.0;   // inclusive range for numbers
  double max = 0.0;
  std::vector<std::string> choices;  // allowed strings (empty: any)
  std::string help;
  ValueRef (*ref)(TrainConfig&) = nullptr;
  // A key added after configs were first saved: the value those configs computed with (null: none). A
  // saved config that lacks the key and one that holds this value describe the same run (config_differences).
  const char* legacy = nullptr;
};

// Every key, in table order.
const std::vector<ConfigKey>& config_keys();

// The model section's keys (config_model.cpp).
void append_model_keys(std::vector<ConfigKey>& keys);

}  // namespace fp8train::train::detail
