// Device: where a tensor's bytes live. CPU is always present; CUDA devices appear when the CUDA backend
// registers itself at start-up (tensor/backend.h).
#pragma once
#include <cstdint>
#include <string>

namespace fp8train {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  static Device cpu() { return {DeviceType::CPU, 0}; }
  static Device cuda(int i = 0) { return {DeviceType::CUDA, i}; }
  bool is_cpu() const { return type == DeviceType::CPU; }
  friend bool operator==(const Device&, const Device&) = default;
  std::string str() const { return type == DeviceType::CPU ? "cpu" : "cuda:" + std::to_string(index); }
};

}  // namespace fp8train
