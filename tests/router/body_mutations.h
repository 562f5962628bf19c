// Request bodies a translator must answer with a result or a 400, never a crash: a good body
// with one of a set of odd values put at one of its paths, for every path and value.
#ifndef LLM_TESTS_ROUTER_BODY_MUTATIONS_H_
#define LLM_TESTS_ROUTER_BODY_MUTATIONS_H_

#include <functional>
#include <vector>

#include "nlohmann/json.hpp"

namespace llm::router::openai {

// Values of every JSON type, empty and not, and objects that look like typed blocks.
inline std::vector<nlohmann::json> OddValues() {
  return {nullptr,
          0,
          -1,
          1e300,
          "",
          "x",
          " ",
          true,
          nlohmann::json::array(),
          nlohmann::json::object(),
          nlohmann::json::array({1}),
          nlohmann::json::object({{"type", 1}}),
          nlohmann::json::object({{"type", "text"}})};
}

// Calls `fn(mutated, path, value)` for each path of `body` (every member and element, at every
// level) and each of `values`, `mutated` being `body` with `value` at `path`.
inline void ForEachMutation(
    const nlohmann::json& body, const std::vector<nlohmann::json>& values,
    const std::function<void(const nlohmann::json&, const nlohmann::json::json_pointer&,
                             const nlohmann::json&)>& fn) {
  using Pointer = nlohmann::json::json_pointer;
  std::vector<Pointer> paths;
  const std::function<void(const nlohmann::json&, const Pointer&)> walk =
      [&](const nlohmann::json& j, const Pointer& at) {
        if (!at.empty()) paths.push_back(at);
        if (j.is_object()) {
          for (const auto& [key, value] : j.items()) walk(value, at / key);
        } else if (j.is_array()) {
          for (size_t i = 0; i < j.size(); ++i) walk(j[i], at / i);
        }
      };
  walk(body, Pointer());
  for (const Pointer& path : paths) {
    for (const nlohmann::json& v : values) {
      nlohmann::json mutated = body;
      mutated[path] = v;
      fn(mutated, path, v);
    }
  }
}

}  // namespace llm::router::openai

#endif  // LLM_TESTS_ROUTER_BODY_MUTATIONS_H_
