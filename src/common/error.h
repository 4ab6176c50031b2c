// fp8train::Error and the FP8T_CHECK family: the one way the library reports bad input or a failed
// call. The library never exits or aborts on bad input; `main` catches Error and exits non-zero.
// what() is the human sentence alone (what a user reads); where() is the failed check and its source
// location, kept apart so that a front end can put it in a debug log instead of on the user's screen.
#pragma once
#include <stdexcept>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace fp8train {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message, std::string where = {})
      : std::runtime_error(message), where_(std::move(where)) {}
  // "check `expr` failed at file.cpp:N" or "at file.cpp:N"; empty when none was recorded.
  const std::string& where() const noexcept { return where_; }

 private:
  std::string where_;
};

// `text` made safe for a terminal: valid UTF-8 is kept, control characters and bytes that are not valid UTF-8
// (a corrupt file's contents quoted in a message) become \xNN escapes, so an error line stays one readable line.
std::string printable_text(const std::string& text);

// Throws Error(message) recording the failed check `expr` (may be null) at file:line.
[[noreturn]] void throw_error(const char* expr, const char* file, int line, const std::string& message);

}  // namespace fp8train

// FP8T_CHECK(cond, "fmt string {}", args...): throws fp8train::Error with a human sentence when cond is false.
#define FP8T_CHECK(cond, ...)                                                                   \
  do {                                                                                          \
    if (!(cond)) ::fp8train::throw_error(#cond, __FILE__, __LINE__, ::fmt::format(__VA_ARGS__)); \
  } while (0)

// FP8T_FAIL("fmt", args...): unconditional failure with the same format.
#define FP8T_FAIL(...) ::fp8train::throw_error(nullptr, __FILE__, __LINE__, ::fmt::format(__VA_ARGS__))
