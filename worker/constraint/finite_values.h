// The finitely many values a JSON Schema admits, for `uniqueItems` sets and `propertyNames`
// (json_schema.cc). Pure logic.
#ifndef LLM_WORKER_CONSTRAINT_FINITE_VALUES_H_
#define LLM_WORKER_CONSTRAINT_FINITE_VALUES_H_

#include <cstddef>
#include <optional>
#include <vector>

#include "worker/constraint/schema_merge.h"

namespace llm::constraint::schema {

inline constexpr size_t kMaxFiniteValues = 256;

// The values `s` admits where they are finitely many (at most kMaxFiniteValues) and each has
// one spelling (`const`, `enum`, boolean, null, and $ref and anyOf/oneOf of those; a `type`
// beside an enum keeps the values of its types), without repeats (JSON equality, as
// uniqueItems compares); nullopt where they are not, or where another keyword beside them
// matters. `root` resolves references (`depth` of them so far, at most kMaxRefDepth);
// `calls` bounds the walk (a schema may fan out through references).
std::optional<std::vector<json>> FiniteValues(const json& s, const json& root, int depth,
                                              int& calls);

}  // namespace llm::constraint::schema

#endif  // LLM_WORKER_CONSTRAINT_FINITE_VALUES_H_
