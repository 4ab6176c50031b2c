#include "common/error.h"

#include <cstring>

namespace fp8train {

void throw_error(const char* expr, const char* file, int line, const std::string& message) {
  const char* base = std::strrchr(file, '/');
  base = base ? base + 1 : file;
  if (expr) throw Error(fmt::format("{} [check `{}` failed at {}:{}]", message, expr, base, line));
  throw Error(fmt::format("{} [at {}:{}]", message, base, line));
}

}  // namespace fp8train
