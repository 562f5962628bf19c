// How deep a parsed JSON value nests, found without recursion. Whatever later walks a value
// recursively (nlohmann's dump, the chat template's conversion to Jinja values) would overflow
// the stack on a hostile body a few hundred kilobytes long, so the router and the worker refuse
// values nested deeper than kMaxJsonNesting before anything recurses over them.
//
// Header-only over any nlohmann::basic_json (json, ordered_json).
#ifndef LLM_COMMON_JSON_DEPTH_H_
#define LLM_COMMON_JSON_DEPTH_H_

#include <utility>
#include <vector>

namespace llm {

// Far beyond what chat messages, tool calls, JSON schemas of tools or template arguments need.
inline constexpr int kMaxJsonNesting = 64;

// Whether `value` has arrays or objects nested more than `limit` deep (a scalar nests 0 deep;
// [] and {} 1; [[1]] 2). Stops at the first value found too deep.
template <typename Json>
bool JsonNestsDeeperThan(const Json& value, int limit) {
  std::vector<std::pair<const Json*, int>> stack = {{&value, 0}};
  while (!stack.empty()) {
    const auto [v, depth] = stack.back();
    stack.pop_back();
    if (!v->is_structured()) continue;
    if (depth + 1 > limit) return true;
    for (const auto& child : *v) stack.emplace_back(&child, depth + 1);
  }
  return false;
}

}  // namespace llm

#endif  // LLM_COMMON_JSON_DEPTH_H_
