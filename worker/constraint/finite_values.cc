#include "worker/constraint/finite_values.h"

#include <algorithm>
#include <initializer_list>
#include <string_view>
#include <utility>

#include "worker/constraint/json_schema.h"
#include "worker/constraint/schema_merge.h"

namespace llm::constraint::schema {

std::optional<std::vector<json>> FiniteValues(const json& s, const json& root, int depth,
                                              int& calls) {
  if (!s.is_object() || --calls < 0) return std::nullopt;
  // Only what the values alone decide (Values and Merged say how keywords beside them hold).
  const auto only = [&s](std::initializer_list<std::string_view> keys) {
    for (const auto& [k, v] : s.items()) {
      if (!Annotation(k) && std::find(keys.begin(), keys.end(), k) == keys.end()) return false;
    }
    return true;
  };
  if (!only({"$ref", "const", "enum", "type", "anyOf", "oneOf"})) return std::nullopt;
  if (s.contains("$ref") && !only({"$ref"})) return std::nullopt;
  if ((s.contains("anyOf") || s.contains("oneOf")) && !only({"anyOf", "oneOf"})) {
    return std::nullopt;
  }
  if (s.contains("$ref")) {
    const json& ref = s["$ref"];
    if (depth >= kMaxRefDepth || !ref.is_string() || ref.get<std::string>().rfind("#", 0) != 0) {
      return std::nullopt;
    }
    try {
      return FiniteValues(root.at(json::json_pointer(ref.get<std::string>().substr(1))), root,
                          depth + 1, calls);
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  std::vector<json> values;
  if (s.contains("const") || s.contains("enum")) {
    auto listed = s.contains("const") ? json::array({s["const"]}) : s["enum"];
    if (!listed.is_array()) return std::nullopt;
    for (const json& v : listed) {
      if (!s.contains("type") || OfTypes(v, s["type"])) values.push_back(v);
    }
  } else if (s.contains("anyOf") || s.contains("oneOf")) {
    const json& list = s.contains("anyOf") ? s["anyOf"] : s["oneOf"];
    if (!list.is_array()) return std::nullopt;
    for (const json& branch : list) {
      auto more = FiniteValues(branch, root, depth, calls);
      if (!more || values.size() + more->size() > kMaxFiniteValues) return std::nullopt;
      values.insert(values.end(), more->begin(), more->end());
    }
  } else if (s.value("type", json()) == json("boolean")) {
    values = {json(false), json(true)};
  } else if (s.value("type", json()) == json("null")) {
    values = {json(nullptr)};
  } else {
    return std::nullopt;
  }
  if (values.size() > kMaxFiniteValues) return std::nullopt;
  // JSON equality, as uniqueItems compares: 1 and 1.0 are one value, and so are objects
  // whose keys differ only in order (nlohmann::json, unlike ordered_json, ignores it).
  std::vector<json> unique;
  std::vector<nlohmann::json> seen;
  for (const json& v : values) {
    nlohmann::json canonical = nlohmann::json::parse(v.dump());
    if (std::find(seen.begin(), seen.end(), canonical) != seen.end()) continue;
    seen.push_back(std::move(canonical));
    unique.push_back(v);
  }
  return unique;
}

}  // namespace llm::constraint::schema
