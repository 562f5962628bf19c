// Patterns of the JSON values a constraint leaves open (json_object, a schema's `{}`, a
// string's content), as byte regexes (byte_regex.h) of compact JSON. Pure logic.
#ifndef LLM_WORKER_CONSTRAINT_JSON_VALUES_H_
#define LLM_WORKER_CONSTRAINT_JSON_VALUES_H_

#include <string>

#include "worker/constraint/pushdown.h"

namespace llm::constraint {

// One character of a JSON string's content: any but the quote, the backslash and control
// bytes, or an escape.
inline constexpr char kJsonStringChar[] = R"(([^"\\\x00-\x1f]|\\(["\\/bfnrt]|u[0-9a-fA-F]{4})))";

// A JSON string (quotes included) with any content.
std::string JsonStringRegex();
// Any compact JSON object whose members' values match `value` (a pattern, or a call to a
// rule: pushdown.h).
std::string JsonObjectOf(const std::string& value);
// Any scalar, or an object or array whose members' values and items match `value`: with
// `value` a call to this pattern's own rule, any JSON value nested as deep as it goes.
std::string JsonValueOf(const std::string& value);
// Any compact JSON object, nested as deep as it goes: the root's pattern and a recursive
// `value` rule's (pushdown.h), the json_object constraint.
RulePatterns JsonObjectPatterns();

}  // namespace llm::constraint

#endif  // LLM_WORKER_CONSTRAINT_JSON_VALUES_H_
