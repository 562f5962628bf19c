// GBNF grammars (gbnf.h) and the pushdown automaton of their recursive rules (pushdown.h).
#include "worker/constraint/gbnf.h"

#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/worker/constraint/regex_language.h"
#include "worker/constraint/constraint.h"
#include "worker/constraint/pushdown.h"

namespace llm::constraint {
namespace {

using ::testing::HasSubstr;

// The language of a GBNF grammar: through the one regex it becomes, or its pushdown
// automaton when a rule recurses.
class GrammarMatch : public PatternsLanguage {
 public:
  explicit GrammarMatch(const std::string& grammar) : PatternsLanguage(GbnfToPatterns(grammar)) {}
};

TEST(GbnfTest, RulesLiteralsClassesAndRepetition) {
  const GrammarMatch yes_no(R"g(root ::= "yes" | "no")g");
  EXPECT_TRUE(yes_no("yes"));
  EXPECT_TRUE(yes_no("no"));
  EXPECT_FALSE(yes_no("yesno"));
  // Several lines, comments, a body over two lines, classes, counts.
  const GrammarMatch list(R"g(# a list of small numbers
root ::= "[" ws num
         ("," ws num)* "]"   # more
num  ::= [1-9] [0-9]{0,2} | "0"
ws   ::= " "?
)g");
  for (const char* ok : {"[1]", "[1, 22,0]", "[999,0]"}) EXPECT_TRUE(list(ok)) << ok;
  for (const char* bad : {"[01]", "[1000]", "[1,]", "[]"}) EXPECT_FALSE(list(bad)) << bad;
  // Blanks before a quantifier and inside braces, as llama.cpp takes them.
  const GrammarMatch spaced(R"g(root ::= "a" * ( "b" ) { 1 , 2 })g");
  EXPECT_TRUE(spaced("aab"));
  EXPECT_TRUE(spaced("bb"));
  EXPECT_FALSE(spaced("bbb"));
  // Escapes, negated classes and any character.
  const GrammarMatch escapes(R"g(root ::= "\x41\u00e9\n" [^"\\] . "\"")g");
  EXPECT_TRUE(escapes("A\xc3\xa9\nzq\""));
  EXPECT_TRUE(escapes("A\xc3\xa9\n\xe4\xb8\xad\n\""));
  EXPECT_FALSE(escapes("A\xc3\xa9\n\"q\""));
}

// A rule that recurses is matched with a stack: values nest as deep as the output goes.
TEST(GbnfTest, RecursionNestsAsDeepAsTheOutput) {
  const GrammarMatch parens(R"g(root ::= "(" root ")" | "x")g");
  EXPECT_TRUE(parens.pushdown());
  EXPECT_TRUE(parens("x"));
  EXPECT_TRUE(parens("(((x)))"));
  EXPECT_TRUE(parens(std::string(200, '(') + "x" + std::string(200, ')')));
  EXPECT_FALSE(parens(std::string(200, '(') + "x" + std::string(199, ')')));
  EXPECT_FALSE(parens("(x))"));
  EXPECT_FALSE(parens("()"));
  // Mutual recursion: JSON-like values, arrays inside arrays.
  const GrammarMatch values(R"g(
root  ::= value
value ::= array | [0-9]+
array ::= "[" (value ("," value)*)? "]"
)g");
  EXPECT_TRUE(values("[1,[2,[3,[]]],4]"));
  EXPECT_TRUE(values("[[[[1]]]]"));
  EXPECT_TRUE(values(std::string(100, '[') + "7" + std::string(100, ']')));
  EXPECT_FALSE(values("[1,[2]"));
  EXPECT_FALSE(values("[1,]"));
  // Past the stack's limit, the output has left what the matcher follows.
  const size_t deep = Pushdown::kMaxDepth + 10;
  EXPECT_FALSE(values(std::string(deep, '[') + "7" + std::string(deep, ']')));
  // A grammar without recursion stays one automaton.
  EXPECT_FALSE(GrammarMatch(R"g(root ::= a a
a ::= "x" | "y")g")
                   .pushdown());
}

// llama.cpp's grammars/json.gbnf, as published.
constexpr char kLlamaCppJson[] = R"g(root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-7]{0,15})? ws

# Optional space: by convention, applied in this grammar after literal chars when allowed
ws ::= | " " | "\n" [ \t]{0,20}
)g";

// Each recursive rule is an automaton of its own, so whitespace of up to 20 characters after
// every token (which multiplied a one-automaton expansion past the state limit) costs its
// own few states once.
TEST(GbnfTest, JsonGrammars) {
  const GrammarMatch json(kLlamaCppJson);
  EXPECT_TRUE(json.pushdown());
  EXPECT_LT(json.states(), 1000u);
  EXPECT_TRUE(json(R"g({"a": [1, 2.5, {"b": null}], "c":"d\n"})g"));
  EXPECT_TRUE(json("{\n  \"a\" : [ [ [ {\"b\": [true]} ] ] ],\n\t\"c\": -1e5 }"));
  EXPECT_FALSE(json(R"g({"a": [1, 2.5, {"b": nul}]})g"));
  EXPECT_FALSE(json(R"g({"a": [1, 2.5, {"b": null}]})g"
                    "}"));
  std::string deep = "{\"k\": ";
  for (int i = 0; i < 40; ++i) deep += "[{\"k\": ";
  deep += "0";
  for (int i = 0; i < 40; ++i) deep += "}]";
  EXPECT_TRUE(json(deep + "}"));
  EXPECT_FALSE(json(deep + "]"));
}

// A vocabulary of single characters and of tokens that close or open several values at once
// (the tokens whose bytes return below the top frames a cached mask depends on).
std::shared_ptr<const TokenTable> BracketVocabulary() {
  std::vector<std::string> bytes = {""};  // 0: the stop token, never text
  for (char c = ' '; c <= '~'; ++c) bytes.emplace_back(1, c);
  for (const char* t :
       {"\n",  "{\"",  "\"}", "}}",   "]]",   "}]",    "]}",      "},",  "],",  "[[",  "[{",
        "\":", "\": ", ", ",  "true", "null", "12",    "0.",      "((",  "))",  "(((", ")))",
        ")x",  "x)",   "}}}", "]]]",  "}}]",  "\"k\"", "\"k\": ", "]]}", "1]]", "x))", "))))"}) {
    bytes.emplace_back(t);
  }
  return std::make_shared<const TokenTable>(bytes);
}

// Along random walks that nest deep, the mask a Matcher writes is exactly the tokens whose
// bytes the whole stack takes (and the stop token where the output is complete or nothing
// else is allowed), whatever a cached top-frame mask says.
TEST(PushdownTest, MasksAreTheTokensTheWholeStackTakes) {
  const auto tokens = BracketVocabulary();
  const int32_t vocab = tokens->vocab_size();
  const std::vector<int32_t> stop = {0};
  std::mt19937 rng(7);
  for (const std::string& grammar : {std::string(R"g(root ::= "(" root ")" | "x")g"),
                                     std::string("root ::= value\nvalue ::= array | [0-9]+\n"
                                                 "array ::= \"[\" (value (\",\" value)*)? \"]\""),
                                     std::string(kLlamaCppJson)}) {
    auto c = Compile({Kind::kGrammar, grammar}, tokens);
    ASSERT_TRUE(c.ok()) << c.status();
    ASSERT_TRUE((*c)->pushdown());
    size_t deepest = 0, checked = 0;
    for (int walk = 0; walk < 40; ++walk) {
      Matcher m(*c);
      Position pos = (*c)->Start();
      std::vector<uint64_t> words(MaskWords(vocab));
      size_t depth = 0;
      for (int step = 0; step < 160; ++step) {
        m.WriteMask(words, stop);
        std::vector<int32_t> allowed, opening;
        for (int32_t t = 1; t < vocab; ++t) {
          Position next = pos;
          const bool takes = (*c)->Walk(next, tokens->bytes(t));
          ASSERT_EQ((words[t / 64] >> (t % 64) & 1) != 0, takes)
              << grammar << "\ntoken '" << tokens->bytes(t) << "' after step " << step;
          if (!takes) continue;
          allowed.push_back(t);
          if (tokens->bytes(t).find_first_of("([{") != std::string::npos) opening.push_back(t);
        }
        ++checked;
        const bool may_end = (*c)->Accepting(pos) || allowed.empty();
        ASSERT_EQ((words[0] & 1) != 0, may_end) << grammar << " after step " << step;
        ASSERT_EQ(m.complete(), (*c)->Accepting(pos));
        if (allowed.empty()) break;
        // Down for the walk's first half, then anywhere: outputs nest tens deep.
        const bool down = step < 80 && !opening.empty() && rng() % 8 != 0;
        const auto& from = down ? opening : allowed;
        const int32_t t = from[rng() % from.size()];
        ASSERT_TRUE(m.Advance(t));
        ASSERT_TRUE((*c)->Walk(pos, tokens->bytes(t)));
        for (const Stack& st : pos.stacks) depth = std::max(depth, st.size());
        deepest = std::max(deepest, depth);
      }
    }
    EXPECT_GT(deepest, 2 * Pushdown::kMaskFrames + 6) << grammar;
    EXPECT_GT(checked, 400u) << grammar;
  }
}

// At the depth limit the mask leaves out what would open another level, and the output can
// still close every level it opened (the mask is what Walk does there too).
TEST(PushdownTest, AtTheDepthLimitOutputsStillClose) {
  const auto tokens = BracketVocabulary();
  auto c = Compile({Kind::kGrammar, R"g(root ::= "(" root ")" | "x")g"}, tokens);
  ASSERT_TRUE(c.ok()) << c.status();
  const auto open = static_cast<int32_t>(1 + '(' - ' ');
  const auto close = static_cast<int32_t>(1 + ')' - ' ');
  const std::vector<int32_t> stop = {0};
  std::vector<uint64_t> words(MaskWords(tokens->vocab_size()));
  const auto allowed = [&](const Matcher& m, int32_t t) {
    m.WriteMask(words, stop);
    return (words[t / 64] >> (t % 64) & 1) != 0;
  };
  const auto agrees = [&](const Matcher& m, const Position& pos) {
    m.WriteMask(words, stop);
    for (int32_t t = 1; t < tokens->vocab_size(); ++t) {
      Position next = pos;
      if (((words[t / 64] >> (t % 64) & 1) != 0) != (*c)->Walk(next, tokens->bytes(t))) {
        return false;
      }
    }
    return true;
  };
  Matcher m(*c);
  Position pos = (*c)->Start();
  size_t opened = 0;
  while (allowed(m, open)) {
    if (opened + 8 > Pushdown::kMaxDepth) {
      ASSERT_TRUE(agrees(m, pos)) << opened;
    }
    ASSERT_TRUE(m.Advance(open));
    ASSERT_TRUE((*c)->Walk(pos, "("));
    ++opened;
  }
  EXPECT_GE(opened + 2, Pushdown::kMaxDepth);
  EXPECT_LE(opened, Pushdown::kMaxDepth);
  EXPECT_TRUE(agrees(m, pos));
  ASSERT_TRUE(m.Advance(1 + 'x' - ' '));
  for (size_t i = 0; i < opened; ++i) {
    ASSERT_TRUE(allowed(m, close)) << i;
    ASSERT_TRUE(m.Advance(close));
  }
  EXPECT_TRUE(m.complete());
  EXPECT_FALSE(m.failed());
}

// A pushdown constraint compiles through the same entry as the others, and a vocabulary that
// cannot begin its output is refused by name.
// Renumbering and dropping rules by their call markers; a call to a rule the grammar does not
// have is an error, never a call that silently goes nowhere.
TEST(PushdownTest, RulesAreRenumberedAndUncalledOnesDropped) {
  const std::string a = CallMarker(1), b = CallMarker(2), c = CallMarker(3);
  EXPECT_EQ(CallsIn("x" + a + "y" + c + a), (std::vector<int32_t>{1, 3, 1}));
  const std::vector<int32_t> to = {0, 5, 6, 7};
  EXPECT_EQ(RenumberCalls("(" + a + "|" + c + ")*", to),
            "(" + CallMarker(5) + "|" + CallMarker(7) + ")*");
  // Rule 1 calls 3; nothing calls 2.
  RulePatterns rules{{"root", "one", "two", "three"},
                     {"\\[" + a + "\\]", "<" + c + ">|x", "y" + b, "z|\\(" + a + "\\)"},
                     true};
  const RulePatterns kept = DropUncalledRules(rules);
  EXPECT_EQ(kept.names, (std::vector<std::string>{"root", "one", "three"}));
  EXPECT_EQ(kept.patterns[1], "<" + b + ">|x");
  EXPECT_TRUE(kept.calls);
  auto pda = Pushdown::Build(kept, kMaxDfaStates, "test");
  ASSERT_TRUE(pda.ok()) << pda.status();
  EXPECT_TRUE(pda->Accepts("[<(<z>)>]"));
  EXPECT_FALSE(DropUncalledRules({{"root", "r"}, {"x", "y"}, true}).calls);
  rules.patterns[2] = "y" + CallMarker(9);
  EXPECT_THAT(Pushdown::Build(rules, kMaxDfaStates, "test").status().message(),
              HasSubstr("rule 'two' calls rule 9 of 4"));
}

TEST(PushdownTest, CompilesThroughTheConstraintEntry) {
  const auto digits = std::make_shared<const TokenTable>(std::vector<std::string>{"", "1", "2"});
  auto c = Compile({Kind::kGrammar, R"g(root ::= "(" root ")" | "x")g"}, digits);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("constraint.grammar: no token of the model's"));
  auto ok = Compile({Kind::kGrammar, R"g(root ::= "(" root ")" | "x")g"}, BracketVocabulary());
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_GT((*ok)->dfa_bytes(), 0u);
  EXPECT_EQ(CacheKeyOf({Kind::kGrammar, "root ::= \"x\""}),
            CacheKeyOf({Kind::kGrammar, "root ::= \"x\""}));
}

TEST(GbnfTest, ErrorsNameTheRule) {
  const auto error = [](const std::string& grammar) {
    absl::Status st;
    auto r = GbnfToPatterns(grammar);
    if (!r.ok()) {
      st = r.status();
    } else if (r->calls) {
      st = Pushdown::Build(*r, kMaxDfaStates, "constraint.grammar").status();
    }
    EXPECT_FALSE(st.ok()) << grammar;
    return std::string(st.message());
  };
  EXPECT_THAT(error(R"g(root ::= item)g"), HasSubstr("rule 'root': refers to rule 'item'"));
  EXPECT_THAT(error(R"g(item ::= "x")g"), HasSubstr("no rule 'root'"));
  EXPECT_THAT(error(R"g(root ::= "x)g"), HasSubstr("rule 'root': a '\"' is not closed"));
  EXPECT_THAT(error("root ::= [\xce\xb1]"), HasSubstr("beyond ASCII"));
  EXPECT_THAT(error(R"g(root ::= root "x" | "y")g"),
              HasSubstr("rule 'root' may begin with itself (left recursion)"));
  EXPECT_THAT(error("root ::= \"(\" a \")\"\na ::= b \"x\" | \"y\"\nb ::= \" \"? a"),
              HasSubstr("left recursion"));
  EXPECT_THAT(error(R"g(root ::= root "x")g"), HasSubstr("rule 'root' never ends"));
  EXPECT_THAT(error("root ::= \"a\" | \"b\" b\nb ::= \"c\" b"), HasSubstr("rule 'b' never ends"));
  EXPECT_THAT(error(R"g(root ::= "a" ::= "b")g"), HasSubstr("unexpected ':'"));
  EXPECT_THAT(error("root ::= \"x\"\nroot ::= \"y\""), HasSubstr("defined twice"));
  EXPECT_THAT(error(R"g(root ::= "x"{2,1})g"), HasSubstr("below its minimum"));
  EXPECT_THAT(error(R"g(root ::= "x"{5000})g"), HasSubstr("above 1000"));
  EXPECT_THAT(error(R"g(root ::= "" | ("")*)g"), HasSubstr("only the empty text"));
  // Doubling at each level: the expansion budget stops it.
  std::string doubling = "root ::= a0\n";
  for (int i = 0; i < 30; ++i) {
    absl::StrAppend(&doubling, "a", i, " ::= a", i + 1, " a", i + 1, "\n");
  }
  absl::StrAppend(&doubling, "a30 ::= \"xy\"\n");
  EXPECT_THAT(error(doubling), HasSubstr("expands to more than"));
  // A long chain of distinct rules (no recursion) stops at a nesting limit, not the stack.
  std::string chain = "root ::= r0\n";
  for (int i = 0; i < 5000; ++i) absl::StrAppend(&chain, "r", i, " ::= r", i + 1, "\n");
  absl::StrAppend(&chain, "r5000 ::= \"a\"\n");
  EXPECT_THAT(error(chain), HasSubstr("nest more than 1000 deep"));
  // One sequence of many large pieces: the budget holds while it grows.
  std::string wide = absl::StrCat("big ::= \"", std::string(100000, 'a'), "\"\nroot ::=");
  for (int i = 0; i < 100; ++i) wide += " big";
  EXPECT_THAT(error(wide), HasSubstr("MiB of pattern"));
  std::string alts = absl::StrCat("big ::= \"", std::string(100000, 'a'), "\"\nroot ::= big");
  for (int i = 0; i < 100; ++i) absl::StrAppend(&alts, " | big \"", i, "\"");
  EXPECT_THAT(error(alts), HasSubstr("MiB of pattern"));
  // Deep groups.
  EXPECT_THAT(error("root ::= " + std::string(200, '(') + "\"x\"" + std::string(200, ')')),
              HasSubstr("nest too deep"));
}

}  // namespace
}  // namespace llm::constraint
