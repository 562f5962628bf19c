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
// A rule that does not recurse is written out where it is referred to; each rule that does
// (directly or through others) gets a pattern of its own, in which a reference to a recursive
// rule is a call (pushdown.h), so values nest as deep as the output goes. Errors name the rule
// and what is wrong: "constraint.grammar: rule 'value': ...".
#ifndef LLM_WORKER_CONSTRAINT_GBNF_H_
#define LLM_WORKER_CONSTRAINT_GBNF_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "worker/constraint/pushdown.h"

namespace llm::constraint {

// The patterns of `grammar`'s rules, the root's first; one pattern without calls when no rule
// the root uses recurses.
absl::StatusOr<RulePatterns> GbnfToPatterns(std::string_view grammar);

}  // namespace llm::constraint

#endif  // LLM_WORKER_CONSTRAINT_GBNF_H_
