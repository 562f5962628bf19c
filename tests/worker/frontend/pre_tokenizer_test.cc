#include "worker/frontend/pre_tokenizer.h"

#include "gtest/gtest.h"
#include "worker/frontend/regex.h"

namespace llm::frontend {
namespace {

std::vector<std::string> Cut(const std::string& text, SplitBehavior behavior, bool invert = false) {
  std::vector<std::pair<size_t, size_t>> matches;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '-') matches.emplace_back(i, i + 1);
  }
  std::vector<std::string> out;
  for (const auto& [b, e] : SplitByMatches(text.size(), matches, behavior, invert)) {
    out.push_back(text.substr(b, e - b));
  }
  return out;
}

// The examples of the reference library's SplitDelimiterBehavior documentation.
// \s and \S mean Unicode White_Space, as in the tokenizers' regex engine (PCRE2's own \s also
// takes U+180E); escaped backslashes and \Q...\E quotes are left alone.
TEST(RegexTest, WhiteSpaceIsUnicodeWhiteSpace) {
  auto matches = [](const std::string& pattern, const std::string& text) {
    auto re = Regex::Compile(pattern);
    EXPECT_TRUE(re.ok()) << re.status();
    std::vector<std::pair<size_t, size_t>> m;
    (*re)->FindAll(text, m);
    std::vector<std::string> out;
    for (const auto& [b, e] : m) out.push_back(text.substr(b, e - b));
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(matches("\\s+", "a \u3000\u0085b\u180ec"), (V{" \u3000\u0085"}));
  EXPECT_EQ(matches("\\S+", "a\u180eb c"), (V{"a\u180eb", "c"}));
  EXPECT_EQ(matches("[^\\s\\p{L}]+", "a\u180e1 b"), (V{"\u180e1"}));
  EXPECT_EQ(matches("\\\\s", "\\s s"), (V{"\\s"}));       // an escaped backslash, then 's'
  EXPECT_EQ(matches("\\Q\\s\\E", "x\\sy "), (V{"\\s"}));  // quoted: the two characters
}

TEST(PreTokenizerTest, SplitBehaviors) {
  const std::string t = "the-final--countdown";
  using V = std::vector<std::string>;
  EXPECT_EQ(Cut(t, SplitBehavior::kRemoved), (V{"the", "final", "countdown"}));
  EXPECT_EQ(Cut(t, SplitBehavior::kIsolated), (V{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(Cut(t, SplitBehavior::kMergedWithPrevious), (V{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(Cut(t, SplitBehavior::kMergedWithNext), (V{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(Cut(t, SplitBehavior::kContiguous), (V{"the", "-", "final", "--", "countdown"}));
  EXPECT_EQ(Cut(t, SplitBehavior::kRemoved, /*invert=*/true), (V{"-", "-", "-"}));
}

TEST(PreTokenizerTest, ByteLevelWithGpt2Regex) {
  auto pre = MakePreTokenizer(nlohmann::json::parse(
      R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": true})"));
  ASSERT_TRUE(pre.ok()) << pre.status();
  std::vector<Piece> pieces{{"Hello my friend, how are you?", true}};
  (*pre)->Apply(pieces);
  std::vector<std::string> words;
  for (const auto& p : pieces) words.push_back(p.text);
  EXPECT_EQ(words, (std::vector<std::string>{"Hello", "\xC4\xA0my",
                                             "\xC4\xA0"
                                             "friend",
                                             ",", "\xC4\xA0how",
                                             "\xC4\xA0"
                                             "are",
                                             "\xC4\xA0you", "?"}));
}

TEST(PreTokenizerTest, MetaspaceFirstOnlyPrependsAtTextStart) {
  auto pre = MakePreTokenizer(nlohmann::json::parse(
      R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": false})"));
  ASSERT_TRUE(pre.ok());
  std::vector<Piece> pieces{{"Hey there", true}, {"you", false}};
  (*pre)->Apply(pieces);
  EXPECT_EQ(pieces[0].text, "▁Hey▁there");
  EXPECT_EQ(pieces[1].text, "you");
}

TEST(PreTokenizerTest, UnsupportedTypeIsNamed) {
  auto pre = MakePreTokenizer(nlohmann::json::parse(R"({"type": "BertPreTokenizer"})"));
  ASSERT_FALSE(pre.ok());
  EXPECT_NE(pre.status().message().find("BertPreTokenizer"), std::string::npos);
}

}  // namespace
}  // namespace llm::frontend
