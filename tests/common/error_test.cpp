// fp8train::Error: what() is the human sentence alone and where() the failed check with its source location
// (kept apart so the CLI shows the sentence and a debug log the location); printable_text() keeps valid UTF-8
// and escapes control characters and invalid bytes, so a message quoting a corrupt file stays one clean line.
#include <gtest/gtest.h>

#include <string>

#include "common/error.h"

using fp8train::Error;

TEST(Error, TheMessageIsTheSentenceAndTheLocationIsKeptApart) {
  try {
    const int n = 3;
    FP8T_CHECK(n > 5, "--batch must be at least {}, got {}", 5, n);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "--batch must be at least 5, got 3");
    EXPECT_NE(e.where().find("check `n > 5` failed at error_test.cpp:"), std::string::npos) << e.where();
  }
  try {
    FP8T_FAIL("training stopped at step {}", 4);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "training stopped at step 4");
    EXPECT_EQ(e.where().rfind("at error_test.cpp:", 0), 0u) << e.where();
  }
}

TEST(Error, PrintableTextEscapesControlAndInvalidBytesOnly) {
  using fp8train::printable_text;
  EXPECT_EQ(printable_text("plain ASCII, 12+30=42"), "plain ASCII, 12+30=42");
  EXPECT_EQ(printable_text("‖Y − R‖ café"), "‖Y − R‖ café");  // valid multi-byte UTF-8 is kept
  EXPECT_EQ(printable_text(std::string("a\nb\tc\x1b[2Jd\x7f", 11)), "a\\x0ab\\x09c\\x1b[2Jd\\x7f");
  EXPECT_EQ(printable_text("caf\xE9 au lait"), "caf\\xe9 au lait");      // Latin-1 byte
  EXPECT_EQ(printable_text("\xC0\xAF"), "\\xc0\\xaf");                    // overlong encoding
  EXPECT_EQ(printable_text("\xED\xA0\x80"), "\\xed\\xa0\\x80");           // UTF-16 surrogate
  EXPECT_EQ(printable_text("\xE2\x80"), "\\xe2\\x80");                    // truncated sequence
  EXPECT_EQ(printable_text(std::string("\0\xff", 2)), "\\x00\\xff");
}
