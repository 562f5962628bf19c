// Token masks on the real vocabularies of ../shared/tokenizers: the class walk that computes
// them (TokenTable::MaskByClass) allows exactly the tokens whose bytes the
// automaton takes, checked token by token against each token's own walk; and a pushdown
// constraint's masks (top-frame masks kept, the returns below them walked per use) allow
// exactly the tokens whose bytes the whole stack takes.
#include <fstream>
#include <memory>
#include <random>
#include <set>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/test_util.h"
#include "worker/constraint/constraint.h"
#include "worker/frontend/tokenizer.h"
#include "worker/loop/constraint_compiler.h"

namespace llm::loop {
namespace {

bool Allowed(const constraint::TokenMask& mask, int32_t t) {
  return (mask[static_cast<size_t>(t) / 64] >> (t % 64) & 1) != 0;
}

// The states a random document passes through (each step a uniformly random allowed token),
// `docs` times, and `extra` states drawn uniformly from the whole automaton.
std::set<int32_t> StatesToCheck(const constraint::CompiledConstraint& c, int docs, int extra,
                                std::mt19937& rng) {
  std::set<int32_t> states;
  const constraint::ByteDfa& dfa = c.dfa();
  for (int d = 0; d < docs; ++d) {
    int32_t s = dfa.start();
    for (int step = 0; step < 48 && s != constraint::ByteDfa::kDead; ++step) {
      states.insert(s);
      const std::shared_ptr<const constraint::TokenMask> mask = c.MaskOf(s);
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t < c.tokens().vocab_size(); ++t) {
        if (Allowed(*mask, t)) allowed.push_back(t);
      }
      if (allowed.empty()) break;
      s = dfa.Walk(s, c.tokens().bytes(allowed[rng() % allowed.size()]));
    }
  }
  for (int i = 0; i < extra; ++i) states.insert(static_cast<int32_t>(rng() % dfa.num_states()));
  return states;
}

std::vector<constraint::ConstraintSpec> Specs() {
  std::ifstream f(llm::testing::SourcePath("tests/data/structured/schemas.json"));
  const nlohmann::json schemas = nlohmann::json::parse(f);
  std::vector<constraint::ConstraintSpec> specs = {
      {constraint::Kind::kRegex, "[A-Z][a-z]{2,8}( [0-9]+)?\\n", {}},
      {constraint::Kind::kGrammar, "root ::= \"<\" [a-f]+ \">\" | \"é\"* \"€\"", {}}};
  for (const auto& s : schemas) specs.push_back({constraint::Kind::kJsonSchema, s.dump(), {}});
  return specs;
}

TEST(TokenMaskTest, ClassWalkEqualsEachTokensOwnWalkOnSharedTokenizers) {
  std::mt19937 rng(7);
  for (const char* name : {"qwen3", "llama3", "mistral"}) {
    auto tok =
        frontend::Tokenizer::Load(llm::testing::SharedPath(std::string("tokenizers/") + name));
    ASSERT_TRUE(tok.ok()) << name << ": " << tok.status();
    ConstraintCompiler compiler(**tok);
    for (const constraint::ConstraintSpec& spec : Specs()) {
      auto c = compiler.Compile(spec);
      ASSERT_TRUE(c.ok()) << name << " " << spec.text << ": " << c.status();
      if ((*c)->pushdown()) continue;  // the next test's
      const constraint::TokenTable& table = (*c)->tokens();
      for (int32_t s : StatesToCheck(**c, 3, 20, rng)) {
        const std::shared_ptr<const constraint::TokenMask> mask = (*c)->MaskOf(s);
        int wrong = 0;
        for (int32_t t = 0; t < table.vocab_size() && wrong < 5; ++t) {
          const bool want = !table.bytes(t).empty() &&
                            (*c)->dfa().Walk(s, table.bytes(t)) != constraint::ByteDfa::kDead;
          if (Allowed(*mask, t) == want) continue;
          ++wrong;
          ADD_FAILURE() << name << " " << spec.text.substr(0, 60) << " state " << s << " token "
                        << t << " '" << table.bytes(t) << "': class walk " << !want;
        }
      }
    }
  }
}

// Along random documents of json_object and of two recursive grammars, on each shared
// tokenizer, every step's mask against each token's own walk of the whole stack set.
TEST(TokenMaskTest, PushdownMasksEqualEachTokensOwnWalkOnSharedTokenizers) {
  std::ifstream f(llm::testing::SourcePath("tests/data/structured/grammars.json"));
  const nlohmann::json grammars = nlohmann::json::parse(f);
  const std::vector<constraint::ConstraintSpec> specs = {
      {constraint::Kind::kJsonObject, "", {}},
      {constraint::Kind::kGrammar, grammars[0].get<std::string>(), {}},
      {constraint::Kind::kGrammar, grammars[1].get<std::string>(), {}}};
  std::mt19937 rng(11);
  for (const char* name : {"qwen3", "llama3", "mistral"}) {
    auto tok =
        frontend::Tokenizer::Load(llm::testing::SharedPath(std::string("tokenizers/") + name));
    ASSERT_TRUE(tok.ok()) << name << ": " << tok.status();
    ConstraintCompiler compiler(**tok);
    for (const constraint::ConstraintSpec& spec : specs) {
      auto c = compiler.Compile(spec);
      ASSERT_TRUE(c.ok()) << name << ": " << c.status();
      ASSERT_TRUE((*c)->pushdown());
      const constraint::TokenTable& table = (*c)->tokens();
      constraint::Position pos = (*c)->Start();
      for (int step = 0; step < 16; ++step) {
        const std::shared_ptr<const constraint::TokenMask> mask = (*c)->MaskAt(pos);
        std::vector<int32_t> allowed;
        int wrong = 0;
        for (int32_t t = 0; t < table.vocab_size() && wrong < 5; ++t) {
          constraint::Position next = pos;
          const bool want = !table.bytes(t).empty() && (*c)->Walk(next, table.bytes(t));
          if (want) allowed.push_back(t);
          if (Allowed(*mask, t) == want) continue;
          ++wrong;
          ADD_FAILURE() << name << " " << spec.text.substr(0, 40) << " step " << step << " token "
                        << t << " '" << table.bytes(t) << "': mask " << !want;
        }
        if (allowed.empty() || wrong > 0) break;
        ASSERT_TRUE((*c)->Walk(pos, table.bytes(allowed[rng() % allowed.size()])));
      }
    }
  }
}

}  // namespace
}  // namespace llm::loop
