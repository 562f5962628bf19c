// The language of a byte regex or a grammar, for tests: whether a text is a complete match.
#ifndef LLM_TESTS_WORKER_CONSTRAINT_REGEX_LANGUAGE_H_
#define LLM_TESTS_WORKER_CONSTRAINT_REGEX_LANGUAGE_H_

#include <optional>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "worker/constraint/byte_dfa.h"
#include "worker/constraint/byte_regex.h"
#include "worker/constraint/constraint.h"
#include "worker/constraint/pushdown.h"

namespace llm::constraint {

class RegexLanguage {
 public:
  // A failed `pattern` (or a pattern that does not compile) fails the test, and the language
  // is then empty.
  explicit RegexLanguage(const absl::StatusOr<std::string>& pattern) {
    EXPECT_TRUE(pattern.ok()) << pattern.status();
    auto nfa = ParseRegex(pattern.value_or("x"), "regex", /*extensions=*/true);
    EXPECT_TRUE(nfa.ok()) << nfa.status();
    if (!nfa.ok()) return;
    auto dfa = ByteDfa::Build(*nfa, kMaxDfaStates, "test");
    EXPECT_TRUE(dfa.ok()) << dfa.status();
    if (dfa.ok()) dfa_ = *std::move(dfa);
  }
  bool operator()(const std::string& text) const {
    if (dfa_.num_states() == 0) return false;
    const int32_t s = dfa_.Walk(dfa_.start(), text);
    return s != ByteDfa::kDead && dfa_.accepting(s);
  }
  size_t states() const { return dfa_.num_states(); }

 private:
  ByteDfa dfa_;
};

// The language of a grammar's patterns (pushdown.h): through the one regex they are where no
// rule is called, else through their pushdown automaton.
class PatternsLanguage {
 public:
  // A failed `rules` (or rules that do not build) fail the test, and the language is then
  // empty.
  explicit PatternsLanguage(const absl::StatusOr<RulePatterns>& rules) {
    EXPECT_TRUE(rules.ok()) << rules.status();
    if (!rules.ok()) return;
    if (!rules->calls) {
      regex_.emplace(rules->patterns[0]);
      return;
    }
    auto pda = Pushdown::Build(*rules, kMaxDfaStates, "test");
    EXPECT_TRUE(pda.ok()) << pda.status();
    if (pda.ok()) pda_.emplace(*std::move(pda));
  }
  bool operator()(const std::string& text) const {
    if (regex_) return (*regex_)(text);
    return pda_ && pda_->Accepts(text);
  }
  bool pushdown() const { return pda_.has_value(); }
  size_t states() const { return regex_ ? regex_->states() : pda_ ? pda_->num_states() : 0; }

 private:
  std::optional<RegexLanguage> regex_;
  std::optional<Pushdown> pda_;
};

}  // namespace llm::constraint

#endif  // LLM_TESTS_WORKER_CONSTRAINT_REGEX_LANGUAGE_H_
