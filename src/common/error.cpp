// throw_error: the Error behind FP8T_CHECK / FP8T_FAIL (error.h).
#include "common/error.h"

#include <cstdint>
#include <cstring>

namespace fp8train {

std::string printable_text(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  const auto escape = [&](unsigned char c) { out += fmt::format("\\x{:02x}", c); };
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      if (c < 0x20 || c == 0x7f) escape(c);
      else out += static_cast<char>(c);
      ++i;
      continue;
    }
    // Length and the smallest code point of a multi-byte sequence (overlong and surrogate forms are invalid).
    const size_t n = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    bool ok = n > 0 && i + n <= text.size();
    uint32_t cp = n == 2 ? c & 0x1fu : n == 3 ? c & 0x0fu : c & 0x07u;
    for (size_t k = 1; ok && k < n; ++k) {
      const auto d = static_cast<unsigned char>(text[i + k]);
      ok = (d & 0xc0) == 0x80;
      cp = (cp << 6) | (d & 0x3fu);
    }
    ok = ok && !(n == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) && !(n == 4 && (cp < 0x10000 || cp > 0x10ffff));
    if (ok) {
      out.append(text, i, n);
      i += n;
    } else {
      escape(c);
      ++i;
    }
  }
  return out;
}

void throw_error(const char* expr, const char* file, int line, const std::string& message) {
  const char* base = std::strrchr(file, '/');
  base = base ? base + 1 : file;
  if (expr) throw Error(message, fmt::format("check `{}` failed at {}:{}", expr, base, line));
  throw Error(message, fmt::format("at {}:{}", base, line));
}

}  // namespace fp8train
