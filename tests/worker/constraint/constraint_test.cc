#include "worker/constraint/constraint.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <random>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/worker/constraint/regex_language.h"
#include "worker/constraint/byte_dfa.h"
#include "worker/constraint/byte_regex.h"

namespace llm::constraint {
namespace {

using ::testing::HasSubstr;

// Whether `text` is in the language of `pattern`, and whether it is a prefix of something in it.
struct Verdict {
  bool full, prefix;
};
Verdict Match(const std::string& pattern, const std::string& text) {
  auto nfa = ParseRegex(pattern);
  EXPECT_TRUE(nfa.ok()) << pattern << ": " << nfa.status();
  auto dfa = ByteDfa::Build(*nfa, 100000, "regex");
  EXPECT_TRUE(dfa.ok()) << dfa.status();
  const int32_t s = dfa->Walk(dfa->start(), text);
  return {s != ByteDfa::kDead && dfa->accepting(s), s != ByteDfa::kDead};
}

TEST(ByteRegexTest, MatchesWholeOutputs) {
  struct Case {
    const char* pattern;
    const char* text;
    bool full, prefix;
  };
  const Case cases[] = {
      {"abc", "abc", true, true},
      {"abc", "ab", false, true},
      {"abc", "abd", false, false},
      {"a|bc", "bc", true, true},
      {"(ab)+", "abab", true, true},
      {"(ab)+", "aba", false, true},
      {"(?:ab)*c", "c", true, true},
      {"a{2,3}", "aaa", true, true},
      {"a{2,3}", "aaaa", false, false},
      {"a{2}", "a", false, true},
      {"a{2,}", "aaaaa", true, true},
      {"[a-c]+", "cab", true, true},
      {"[^a-c]", "d", true, true},
      {"[^a-c]", "b", false, false},
      {"\\d{3}-\\d{4}", "555-1234", true, true},
      {"\\w+@\\w+\\.com", "ab@cd.com", true, true},
      {"^yes|no$", "no", true, true},
      {"colou?r", "color", true, true},
      {"\\.", ".", true, true},
      {"\\.", "a", false, false},
      {".", "\n", false, false},
      {"\\u00e9", "\xc3\xa9", true, true},
      {"caf\xc3\xa9", "caf\xc3", false, true},
      // A negated class and `.` take a whole non-ASCII character, byte by byte.
      {"[^\"]", "\xe2\x82\xac", true, true},
      {".", "\xe2\x82", false, true},
      // A quantifier after a multi-byte character repeats the whole character.
      {"\xc3\xa9+", "\xc3\xa9\xc3\xa9", true, true},
      {"\xc3\xa9+", "\xc3\xa9\xa9", false, false},
      {"[\\d\\s]+", "1 2", true, true},
      {"a*?b", "aab", true, true},
      // Only well-formed UTF-8: no overlong form, no surrogate, nothing past U+10FFFF.
      {".", "\xe0\x80", false, false},
      {".", "\xed\xa0", false, false},
      {".", "\xf4\x90", false, false},
      {".", "\xc0\xaf", false, false},
      {".", "\xf0\x9f\x98\x80", true, true},
  };
  for (const Case& c : cases) {
    const Verdict v = Match(c.pattern, c.text);
    EXPECT_EQ(v.full, c.full) << c.pattern << " on '" << c.text << "'";
    EXPECT_EQ(v.prefix, c.prefix) << c.pattern << " on '" << c.text << "'";
  }
}

// A length group (?{m,n}...) keeps the strings of its body that are m..n characters long
// (UTF-8 characters, not bytes), checked against counting on every string up to 7 long.
TEST(ByteRegexTest, LengthGroupsCountCharacters) {
  const std::vector<std::string> alphabet = {"a", "b", "-", "\xc3\xa9", "\xe2\x82\xac"};
  std::vector<std::string> texts = {""};
  for (size_t i = 0; i < texts.size() && texts.size() < 20000; ++i) {
    if (texts[i].size() >= 7 * 3) continue;
    for (const std::string& c : alphabet) texts.push_back(texts[i] + c);
  }
  const auto chars = [](const std::string& t) {
    return std::count_if(t.begin(), t.end(), [](char c) { return (c & 0xC0) != 0x80; });
  };
  struct Case {
    std::string body;                            // a pattern
    std::function<bool(const std::string&)> in;  // its language
  };
  const std::vector<Case> bodies = {
      {"[ab]+",
       [](const std::string& t) {
         return !t.empty() && t.find_first_not_of("ab") == std::string::npos;
       }},
      {"[^-]*", [](const std::string& t) { return t.find('-') == std::string::npos; }},
      {"a(b|-)*|.*\xe2\x82\xac", [](const std::string& t) {
         const bool ab =
             !t.empty() && t[0] == 'a' && t.find_first_not_of("b-", 1) == std::string::npos;
         return ab || t.ends_with("\xe2\x82\xac");
       }}};
  for (const Case& c : bodies) {
    for (const auto& [lo, hi] : std::vector<std::pair<int, int>>{{0, 0}, {2, 4}, {1, -1}, {3, 3}}) {
      const std::string pattern =
          absl::StrCat("(?{", lo, hi < 0 ? "," : absl::StrCat(",", hi), "}", c.body, ")");
      auto nfa = ParseRegex(pattern, "regex", /*extensions=*/true);
      ASSERT_TRUE(nfa.ok()) << pattern << ": " << nfa.status();
      auto dfa = ByteDfa::Build(*nfa, 100000, "regex");
      if (!dfa.ok()) {  // an empty language ([ab]+ of no characters)
        EXPECT_THAT(dfa.status().message(), HasSubstr("no output satisfies")) << pattern;
        for (const std::string& t : texts) {
          ASSERT_FALSE(c.in(t) && chars(t) >= lo && (hi < 0 || chars(t) <= hi)) << pattern;
        }
        continue;
      }
      for (const std::string& t : texts) {
        const int32_t s = dfa->Walk(dfa->start(), t);
        const bool full = s != ByteDfa::kDead && dfa->accepting(s);
        const auto n = chars(t);
        ASSERT_EQ(full, c.in(t) && n >= lo && (hi < 0 || n <= hi))
            << pattern << " on '" << t << "'";
      }
    }
  }
  // A prefix that can no longer complete is dead at once, not when nothing more fits.
  auto email = ParseRegex("(?{0,4}[a-z]+@)", "regex", true);
  ASSERT_TRUE(email.ok());
  auto dfa = ByteDfa::Build(*email, 1000, "regex");
  ASSERT_TRUE(dfa.ok());
  EXPECT_NE(dfa->Walk(dfa->start(), "abc"), ByteDfa::kDead);
  EXPECT_EQ(dfa->Walk(dfa->start(), "abcd"), ByteDfa::kDead);
  EXPECT_THAT(ParseRegex("(?{x}a)", "regex", true).status().message(),
              HasSubstr("a length group needs"));
  EXPECT_THAT(ParseRegex("(?{2,1}a)", "regex", true).status().message(),
              HasSubstr("maximum is below"));
  // A client's pattern is what other engines accept: no extensions.
  EXPECT_THAT(ParseRegex("(?{2}a)").status().message(), HasSubstr("not supported here"));
  EXPECT_THAT(ParseRegex("(?~a)").status().message(), HasSubstr("not supported here"));
  EXPECT_THAT(ParseRegex("(?{1000}(?{1000}[ab]{1000}))", "regex", true).status().message(),
              HasSubstr("expands to more than"));
}

TEST(ByteRegexTest, UnsupportedSyntaxNamesTheOffset) {
  for (const auto& [pattern, what] :
       std::vector<std::pair<std::string, std::string>>{{"(a", "missing ')'"},
                                                        {"a)", "unexpected ')'"},
                                                        {"[ab", "missing ']'"},
                                                        {"(a)\\1", "backreferences"},
                                                        {"(?=a)", "lookaround"},
                                                        {"\\p{L}", "not supported"},
                                                        {"*a", "nothing to repeat"},
                                                        {"a{3,2}", "maximum is below"},
                                                        {"[\xc3\xa9]", "non-ASCII class"},
                                                        {"a^b", "anchors"}}) {
    auto nfa = ParseRegex(pattern, "constraint.regex");
    ASSERT_FALSE(nfa.ok()) << pattern;
    EXPECT_THAT(nfa.status().message(), HasSubstr("constraint.regex: "));
    EXPECT_THAT(nfa.status().message(), HasSubstr(what)) << pattern;
    EXPECT_THAT(nfa.status().message(), HasSubstr("at offset")) << pattern;
  }
  // Stacked quantifiers and huge counts are errors, not a million-deep tree or literal text.
  for (const std::string& p : {std::string("a**"), std::string("a{2}{3}"), std::string("a+?*"),
                               "a" + std::string(1000000, '*')}) {
    EXPECT_THAT(ParseRegex(p).status().message(), HasSubstr("multiple repeat")) << p.size();
  }
  EXPECT_THAT(ParseRegex("\\d{1000000}").status().message(), HasSubstr("above 1000"));
  EXPECT_TRUE(ParseRegex("a{x}").ok());  // not a quantifier: the literal text
  // Deep nesting is an error, not a stack overflow.
  auto deep = ParseRegex(std::string(100000, '(') + "a" + std::string(100000, ')'));
  EXPECT_THAT(deep.status().message(), HasSubstr("nested too deep"));
  // Too many automaton states is an error, not a stall.
  auto nfa = ParseRegex("(a|b|c|d)*a(a|b|c|d){20}");
  ASSERT_TRUE(nfa.ok());
  auto dfa = ByteDfa::Build(*nfa, 5000, "constraint.regex");
  EXPECT_FALSE(dfa.ok());
  EXPECT_THAT(dfa.status().message(), HasSubstr("constraint.regex: the constraint needs more"));
}

TEST(ByteRegexTest, EscapedTextMatchesItselfOnly) {
  const std::string text = "a.b*c(d)[e]{f}|g+h?^$\\/";
  EXPECT_TRUE(Match(EscapeRegex(text), text).full);
  EXPECT_FALSE(Match(EscapeRegex(text), "a.b*c(d)[e]{f}|g+h?^$\\").full);
}

// A vocabulary of single characters, a few words and a special token (id 0), able to spell
// any compact JSON over these letters.
std::shared_ptr<const TokenTable> Vocabulary() {
  return std::make_shared<TokenTable>(std::vector<std::string>{
      "",  "{", "}",  "\"", "a", "b", ":", ",", "1", "2", "true", "\"a\"", "yes", "no", " ",
      "[", "]", "ye", "s",  "n", "o", "t", "r", "u", "e", "f",    "l",     "0",   "-",  "."});
}
constexpr int32_t kVocab = 30;
constexpr int32_t kEos = 0;  // the special token: empty bytes

std::vector<int32_t> Allowed(Matcher& m, int32_t vocab) {
  std::vector<float> logits(static_cast<size_t>(vocab), 0.0f);
  const int32_t stops[] = {kEos};
  m.Apply(logits, stops);
  std::vector<int32_t> allowed;
  for (int32_t t = 0; t < vocab; ++t) {
    if (logits[t] > -std::numeric_limits<float>::infinity()) allowed.push_back(t);
  }
  return allowed;
}

TEST(MatcherTest, ChoiceMasksAndEndsWithAStopToken) {
  auto c = Compile({Kind::kChoice, "", {"yes", "no"}}, Vocabulary());
  ASSERT_TRUE(c.ok()) << c.status();
  Matcher m(*c);
  // "yes", "ye", "no", "n" start an allowed output; nothing else, and not the end.
  EXPECT_THAT(Allowed(m, kVocab), ::testing::UnorderedElementsAre(12, 13, 17, 19));
  ASSERT_TRUE(m.Advance(17));                                   // "ye"
  EXPECT_THAT(Allowed(m, kVocab), ::testing::ElementsAre(18));  // "s"
  ASSERT_TRUE(m.Advance(18));
  EXPECT_TRUE(m.complete());
  EXPECT_THAT(Allowed(m, kVocab), ::testing::ElementsAre(kEos));  // only the end
  EXPECT_FALSE(m.Advance(4));
}

// A run of proposals stands up to the first token the constraint refuses; a stop id only
// where the output before it is complete. The matcher does not move.
TEST(MatcherTest, AllowedPrefixStopsAtTheFirstRefusedProposal) {
  auto c = Compile({Kind::kChoice, "", {"yes", "no"}}, Vocabulary());
  ASSERT_TRUE(c.ok()) << c.status();
  Matcher m(*c);
  const int32_t stops[] = {kEos};
  const auto allowed = [&](std::vector<int32_t> tokens) { return m.AllowedPrefix(tokens, stops); };
  EXPECT_EQ(allowed({17, 18, kEos, 4}), 3u);  // "ye" "s" end, then nothing
  EXPECT_EQ(allowed({17, kEos}), 1u);         // "ye" is not complete
  EXPECT_EQ(allowed({19, 20}), 2u);           // "n" "o"
  EXPECT_EQ(allowed({19, 18}), 1u);           // "n" "s"
  EXPECT_EQ(allowed({4, 17}), 0u);            // "a"
  EXPECT_EQ(allowed({kVocab + 3}), 0u);       // not a token
  EXPECT_EQ(allowed({}), 0u);
  EXPECT_THAT(Allowed(m, kVocab), ::testing::UnorderedElementsAre(12, 13, 17, 19));
  ASSERT_TRUE(m.Advance(12));
  EXPECT_EQ(allowed({kEos, 12}), 1u);
}

// A request's stop id that is an ordinary token ("," here) may not end an incomplete output,
// even where the constraint would take it.
TEST(MatcherTest, AStopIdThatIsATokenEndsOnlyACompleteOutput) {
  auto c = Compile({Kind::kRegex, "a,b", {}}, Vocabulary());
  ASSERT_TRUE(c.ok());
  Matcher m(*c);
  ASSERT_TRUE(m.Advance(4));  // "a"
  std::vector<float> logits(kVocab, 0.0f);
  const int32_t stops[] = {kEos, 7};  // 7 is ","
  m.Apply(logits, stops);
  EXPECT_EQ(logits[7], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(logits[kEos], -std::numeric_limits<float>::infinity());
}

// The CPU reference of the device sampler's mask: clear bits and ids past the words become
// -inf, set bits keep their logit; WriteMask leaves ids the vocabulary lacks clear.
TEST(MatcherTest, TokenMaskBitsAndWords) {
  std::vector<float> logits(150, 1.5f);
  std::vector<uint64_t> words = {~uint64_t{0}, uint64_t{1} << 5};  // 0..63 and 69
  ApplyTokenMask(logits, words);
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (int t = 0; t < 150; ++t) {
    EXPECT_EQ(logits[t], t < 64 || t == 69 ? 1.5f : neg_inf) << t;
  }
  auto c = Compile({Kind::kRegex, ".*", {}}, Vocabulary());
  ASSERT_TRUE(c.ok());
  Matcher m(*c);
  std::vector<uint64_t> mask(3, 0);  // 192 ids over a 30-token vocabulary
  const int32_t stops[] = {kEos, 100};
  m.WriteMask(mask, stops);
  EXPECT_EQ(mask[0], ((uint64_t{1} << kVocab) - 1));  // every token, and EOS (complete)
  EXPECT_EQ(mask[1], uint64_t{1} << (100 - 64));      // a stop id past the vocabulary
  EXPECT_EQ(mask[2], 0u);
}

// Words of every kind (all set, none, mixed, a partial last word) mask exactly their bits.
TEST(MatcherTest, ApplyTokenMaskKeepsExactlyTheSetBits) {
  std::mt19937_64 rng(3);
  for (size_t vocab : {64u, 1000u, 1029u}) {
    std::vector<uint64_t> words(MaskWords(static_cast<int64_t>(vocab)));
    for (size_t w = 0; w < words.size(); ++w) {
      words[w] = w % 4 == 0 ? ~uint64_t{0} : w % 4 == 1 ? 0 : rng() | rng();
    }
    std::vector<float> logits(vocab);
    for (size_t t = 0; t < vocab; ++t) logits[t] = static_cast<float>(t) - 500.5f;
    ApplyTokenMask(logits, words);
    for (size_t t = 0; t < vocab; ++t) {
      const bool keep = (words[t / 64] >> (t % 64) & 1) != 0;
      EXPECT_EQ(logits[t],
                keep ? static_cast<float>(t) - 500.5f : -std::numeric_limits<float>::infinity())
          << vocab << " " << t;
    }
  }
}

// A special token's bytes (SpecialTokenBytes) are matched only by a pattern that embeds them:
// a regex of text never allows the token, and one that names it allows it where it names it.
TEST(MatcherTest, SpecialTokensOnlyWhereThePatternNamesThem) {
  std::vector<std::string> bytes = {"", "[", "TOOL", "_CALLS", "]", " ", "a", "\xFF", "1"};
  bytes[0] = SpecialTokenBytes(0);  // a special token (its bytes begin with the "\xFF" token's)
  auto vocab = std::make_shared<TokenTable>(bytes);
  const int32_t stops[] = {99};
  auto text = Compile({Kind::kRegex, "(.|\\n)*", {}}, vocab);
  ASSERT_TRUE(text.ok()) << text.status();
  Matcher any(*text);
  std::vector<uint64_t> mask(1);
  any.WriteMask(mask, stops);
  EXPECT_EQ(mask[0] & 1, 0u);         // not the special token
  EXPECT_EQ((mask[0] >> 7) & 1, 0u);  // nor a lone 0xFF (not UTF-8)
  EXPECT_EQ((mask[0] >> 6) & 1, 1u);  // text is
  auto named = Compile({Kind::kRegex, SpecialTokenBytes(0) + " a", {}}, vocab);
  ASSERT_TRUE(named.ok()) << named.status();
  Matcher m(*named);
  m.WriteMask(mask, stops);
  EXPECT_EQ(mask[0], uint64_t{1} << 0);  // only the special token first
  ASSERT_TRUE(m.Advance(0));
  m.WriteMask(mask, stops);
  EXPECT_EQ(mask[0], uint64_t{1} << 5);
}

// The class walk (MaskOf) allows exactly the tokens whose bytes the automaton takes one by
// one, in every state of patterns where byte classes split (letters, digits, UTF-8 lead and
// continuation bytes told apart) and where they do not (inside a string).
TEST(MatcherTest, ClassWalkMasksEqualEachTokensOwnWalk) {
  std::vector<std::string> bytes = {"",         "a",
                                    "m",        "z",
                                    "am",       "mz",
                                    "za",       "abc",
                                    "\"",       "\\",
                                    "\\n",      "é",
                                    "\xC3",     "\xA9",
                                    "1",        "12",
                                    "x1",       "\"a",
                                    "a\"",      "\xE2\x82\xAC",
                                    "\xED\x9F", "\xF0\x9F\x98\x80",
                                    " ",        "\t",
                                    "\x7F"};
  bytes[0] = SpecialTokenBytes(0);
  auto vocab = std::make_shared<TokenTable>(bytes);
  for (const char* pattern :
       {"[a-m]+z", "\"([^\"\\\\]|\\\\.)*\"x", "[0-5]{2}x|é+|€", "(a|\\d)*[^a-z\"]?", ".*"}) {
    auto c = Compile({Kind::kRegex, pattern, {}}, vocab);
    ASSERT_TRUE(c.ok()) << pattern << ": " << c.status();
    const ByteDfa& dfa = (*c)->dfa();
    for (int32_t s = 0; s < static_cast<int32_t>(dfa.num_states()); ++s) {
      const std::shared_ptr<const TokenMask> mask = (*c)->MaskOf(s);
      for (int32_t t = 0; t < vocab->vocab_size(); ++t) {
        const bool want =
            !vocab->bytes(t).empty() && dfa.Walk(s, vocab->bytes(t)) != ByteDfa::kDead;
        EXPECT_EQ(((*mask)[static_cast<size_t>(t) / 64] >> (t % 64) & 1) != 0, want)
            << pattern << " state " << s << " token " << t;
      }
    }
  }
}

// Random walks through json_object's masks: every token sampled from the allowed set keeps the
// output a prefix of a JSON object, and the walks that end are complete objects.
TEST(MatcherTest, JsonObjectWalksStayJson) {
  auto c = Compile({Kind::kJsonObject}, Vocabulary());
  ASSERT_TRUE(c.ok()) << c.status();
  std::mt19937 rng(5);
  int ended = 0;
  for (int walk = 0; walk < 200; ++walk) {
    Matcher m(*c);
    std::string text;
    const auto tokens = Vocabulary();
    for (int step = 0; step < 40; ++step) {
      const std::vector<int32_t> allowed = Allowed(m, kVocab);
      ASSERT_FALSE(allowed.empty()) << text;
      const int32_t t = allowed[rng() % allowed.size()];
      if (t == kEos) {
        EXPECT_TRUE(m.complete()) << text;
        EXPECT_EQ(text.front(), '{');
        EXPECT_EQ(text.back(), '}');
        ++ended;
        break;
      }
      ASSERT_TRUE(m.Advance(t));
      text += tokens->bytes(t);
    }
  }
  EXPECT_GT(ended, 0);
}

TEST(MatcherTest, CompileErrorsNameTheField) {
  auto c = Compile({Kind::kChoice, "", {"a", ""}}, Vocabulary());
  EXPECT_THAT(c.status().message(), HasSubstr("constraint.choice[1]"));
  c = Compile({Kind::kRegex, "(a"}, Vocabulary());
  EXPECT_THAT(c.status().message(), HasSubstr("constraint.regex: missing ')'"));
}

}  // namespace
}  // namespace llm::constraint
