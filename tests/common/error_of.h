// The message of the fp8train::Error a call throws, or "" when it throws none (header only; include as
// "../common/error_of.h").
#pragma once
#include <functional>
#include <string>

#include "common/error.h"

namespace fp8train::test_util {

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace fp8train::test_util
