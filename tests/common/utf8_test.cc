#include "common/utf8.h"

#include "gtest/gtest.h"

namespace llm {
namespace {

TEST(Utf8Test, ValidatesWellFormedText) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("hello"));
  EXPECT_TRUE(IsValidUtf8("\xC3\xA9 \xE4\xB8\xAD \xF0\x9F\xA4\x97"));  // é 中 🤗
  EXPECT_FALSE(IsValidUtf8("\xC0\xAF"));                               // overlong
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));                           // surrogate
  EXPECT_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));                       // above U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\xF0\x9F\xA4"));                           // truncated
  EXPECT_FALSE(IsValidUtf8("a\x80"));                                  // stray continuation
  EXPECT_EQ(FirstInvalidUtf8("ab\xFF"), 2u);
}

// Expected strings follow Rust's String::from_utf8_lossy (maximal subparts, Unicode 3.9).
TEST(Utf8Test, LossyReplacesMaximalSubparts) {
  const std::string r(kReplacementChar);
  EXPECT_EQ(Utf8Lossy("abc"), "abc");
  EXPECT_EQ(Utf8Lossy("\xF0\x9F\xA4"), r);  // one truncated sequence
  EXPECT_EQ(Utf8Lossy("\xF0\x9F"), r);
  EXPECT_EQ(Utf8Lossy("\x80\x80"), r + r);          // two stray bytes
  EXPECT_EQ(Utf8Lossy("\xE0\x80\x80"), r + r + r);  // E0 needs A0..BF next
  EXPECT_EQ(Utf8Lossy("\xF0\x9F\xA4x"), r + "x");
  EXPECT_EQ(Utf8Lossy("a\xC3"), "a" + r);
  EXPECT_EQ(Utf8Lossy("\xF1\x80\x80\xE1\x80\xC2\x41"), r + r + r + "A");
}

TEST(Utf8Test, RoundTripsCodePoints) {
  for (char32_t cp : {0x41u, 0xE9u, 0x4E2Du, 0x1F917u, 0x10FFFFu}) {
    std::string s;
    AppendUtf8(cp, s);
    ASSERT_TRUE(IsValidUtf8(s));
    size_t pos = 0;
    EXPECT_EQ(DecodeUtf8(s, pos), cp);
    EXPECT_EQ(pos, s.size());
  }
}

}  // namespace
}  // namespace llm
