// GBNF (llama.cpp's grammar format) to a byte regex (byte_regex.h), for the `grammar`
// constraint (vLLM's structured_outputs.grammar). Pure logic.
//
// Syntax: rules `name ::= body` (names of letters, digits, '-' and '_'); a body runs until the
// next `name ::=`, over as many lines as it needs; the rule `root` is the output. In a body:
//   "literal"   with escapes \n \r \t \\ \" \' \[ \] \xHH \uHHHH \UHHHHHHHH;
//   [a-z_] [^"\\]  character classes of ASCII members (\-escapes as in literals; a negated
//               class also takes every non-ASCII character);
//   .           any character;
//   name        another rule;
//   ( ... )     a group; `|` between alternatives;
//   * + ? {m} {m,} {m,n}   repetition of the element before;
//   # ...       a comment, to the end of the line.
// A grammar compiles to one automaton, so recursion is expanded: a rule may appear inside its
// own expansion at most kMaxGrammarRecursion times (JSON-like nesting 4 deep); deeper
// branches are left out. Errors name the rule and what is wrong: "constraint.grammar: rule
// 'value': ...".
#ifndef LLM_WORKER_CONSTRAINT_GBNF_H_
#define LLM_WORKER_CONSTRAINT_GBNF_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace llm::constraint {

inline constexpr int kMaxGrammarRecursion = 3;

// The regex of the outputs `grammar`'s root rule generates (within the recursion limit).
absl::StatusOr<std::string> GbnfToRegex(std::string_view grammar);

}  // namespace llm::constraint

#endif  // LLM_WORKER_CONSTRAINT_GBNF_H_
