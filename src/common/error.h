// fp8train::Error and the FP8T_CHECK family: the one way the library reports bad input or a failed
// call. The library never exits or aborts on bad input; `main` catches Error and exits non-zero.
#pragma once
#include <stdexcept>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace fp8train {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Builds "<message> [check `expr` failed at file:line]" and throws Error.
[[noreturn]] void throw_error(const char* expr, const char* file, int line, const std::string& message);

}  // namespace fp8train

// FP8T_CHECK(cond, "fmt string {}", args...): throws fp8train::Error with a human sentence when cond is false.
#define FP8T_CHECK(cond, ...)                                                                   \
  do {                                                                                          \
    if (!(cond)) ::fp8train::throw_error(#cond, __FILE__, __LINE__, ::fmt::format(__VA_ARGS__)); \
  } while (0)

// FP8T_FAIL("fmt", args...): unconditional failure with the same format.
#define FP8T_FAIL(...) ::fp8train::throw_error(nullptr, __FILE__, __LINE__, ::fmt::format(__VA_ARGS__))
