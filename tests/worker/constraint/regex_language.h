// The language of a byte regex, for tests: whether a text is a complete match.
#ifndef LLM_TESTS_WORKER_CONSTRAINT_REGEX_LANGUAGE_H_
#define LLM_TESTS_WORKER_CONSTRAINT_REGEX_LANGUAGE_H_

#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "worker/constraint/byte_dfa.h"
#include "worker/constraint/byte_regex.h"
#include "worker/constraint/constraint.h"

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

}  // namespace llm::constraint

#endif  // LLM_TESTS_WORKER_CONSTRAINT_REGEX_LANGUAGE_H_
