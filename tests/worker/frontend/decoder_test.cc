#include "worker/frontend/decoder.h"

#include "gtest/gtest.h"

namespace llm::frontend {
namespace {

std::string DecodeWith(const char* spec, std::vector<std::string> tokens, bool raw = false) {
  auto d = MakeDecoder(nlohmann::json::parse(spec));
  EXPECT_TRUE(d.ok()) << d.status();
  (*d)->DecodeChain(tokens, raw);
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

TEST(DecoderTest, ByteFallback) {
  const char* bf = R"({"type": "ByteFallback"})";
  EXPECT_EQ(DecodeWith(bf, {"<0x61>"}), "a");
  EXPECT_EQ(DecodeWith(bf, {"<0xE5>", "<0x8f>", "<0xab>", "a"}), "叫a");
  EXPECT_EQ(DecodeWith(bf, {"<0xE5>", "<0x8f>", "a"}), "\uFFFD\uFFFDa");  // one U+FFFD per byte
  EXPECT_EQ(DecodeWith(bf, {"<0xE5>", "<0x8f>", "a"}, /*raw=*/true),
            "\xE5\x8F"
            "a");
  EXPECT_EQ(DecodeWith(bf, {"Hey", "<0xZZ>"}), "Hey<0xZZ>");
}

TEST(DecoderTest, SentencepieceChain) {
  const char* chain = R"({"type": "Sequence", "decoders": [
      {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
      {"type": "ByteFallback"}, {"type": "Fuse"},
      {"type": "Strip", "content": " ", "start": 1, "stop": 0}]})";
  EXPECT_EQ(DecodeWith(chain, {"▁Hello", "▁world", "<0x21>"}), "Hello world!");
  EXPECT_EQ(DecodeWith(chain, {"▁▁x"}), " x");
}

TEST(DecoderTest, ByteLevelIsLossyOnlyAtTheEnd) {
  const char* bl = R"({"type": "ByteLevel"})";
  EXPECT_EQ(DecodeWith(bl, {"Hello", "\xC4\xA0world"}), "Hello world");
  // "ðŁ" + "¤" + "Ĺ" are the four bytes of U+1F917 split over tokens.
  EXPECT_EQ(DecodeWith(bl, {"\xC3\xB0\xC5\x81", "\xC2\xA4", "\xC4\xB9"}), "🤗");
  EXPECT_EQ(DecodeWith(bl, {"\xC3\xB0\xC5\x81"}), "\uFFFD");
  // A token with a character outside the byte table keeps its own bytes.
  EXPECT_EQ(DecodeWith(bl, {"<|im_start|>", "中"}), "<|im_start|>中");
}

TEST(DecoderTest, UnsupportedTypeIsNamed) {
  auto d = MakeDecoder(nlohmann::json::parse(R"({"type": "WordPiece"})"));
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("WordPiece"), std::string::npos);
}

}  // namespace
}  // namespace llm::frontend
