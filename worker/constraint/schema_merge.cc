#include "worker/constraint/schema_merge.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"

namespace llm::constraint::schema {
namespace {

absl::Status Error(const std::string& path, std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("constraint.json_schema: ", path, ": ", std::string(what)));
}

// The types both `a` and `b` (names or lists of names) admit: an integer is a number.
json CommonTypes(const json& a, const json& b) {
  const auto list = [](const json& t) { return t.is_array() ? t : json::array({t}); };
  json out = json::array();
  for (const json& x : list(a)) {
    for (const json& y : list(b)) {
      if (x == y || (x == "integer" && y == "number")) {
        out.push_back(x);
      } else if (x == "number" && y == "integer") {
        out.push_back(y);
      }
    }
  }
  return out.size() == 1 ? out[0] : out;
}

bool IsOfType(const json& v, const std::string& type) {
  if (type == "integer") {
    return v.is_number_integer() ||
           (v.is_number_float() && std::trunc(v.get<double>()) == v.get<double>());
  }
  return (type == "number" && v.is_number()) || (type == "string" && v.is_string()) ||
         (type == "boolean" && v.is_boolean()) || (type == "null" && v.is_null()) ||
         (type == "object" && v.is_object()) || (type == "array" && v.is_array());
}

}  // namespace

bool Annotation(const std::string& key) {
  static const std::set<std::string> keys = {"title",   "description", "default",      "examples",
                                             "$schema", "$id",         "$comment",     "strict",
                                             "name",    "readOnly",    "writeOnly",    "deprecated",
                                             "$defs",   "definitions", "discriminator"};
  return keys.count(key) > 0;
}

json Beside(const json& s, const std::string& combinator) {
  json beside = json::object();
  for (const auto& [k, v] : s.items()) {
    if (k != combinator && !Annotation(k)) beside[k] = v;
  }
  return beside;
}

absl::StatusOr<json> Merged(const json& branch, const json& beside, const std::string& path,
                            const std::string& combinator) {
  if (beside.empty() || branch == json(false)) return branch;
  json merged = branch == json(true) ? json::object() : branch;
  if (!merged.is_object()) return merged;  // refused by Schema
  for (const auto& [judge, judged] :
       {std::pair{"additionalProperties", "properties"},
        std::pair{"patternProperties", "properties"}, std::pair{"items", "prefixItems"}}) {
    if ((beside.contains(judge) && merged.contains(judged) && !beside.contains(judged)) ||
        (merged.contains(judge) && beside.contains(judged) && !merged.contains(judged))) {
      return Error(path, absl::StrCat(judge, " and the ", judged, " it judges split between ",
                                      combinator, " and this branch: not supported"));
    }
  }
  for (const auto& [k, v] : beside.items()) {
    if (!merged.contains(k) || merged[k] == v) {
      merged[k] = v;
    } else if (k == "required" && v.is_array() && merged[k].is_array()) {
      for (const json& name : v) {
        if (std::find(merged[k].begin(), merged[k].end(), name) == merged[k].end()) {
          merged[k].push_back(name);
        }
      }
    } else if (k == "type") {
      merged[k] = CommonTypes(merged[k], v);
    } else {
      return Error(path + "." + k,
                   absl::StrCat("also beside ", combinator, ", with another value: not supported"));
    }
  }
  return merged;
}

absl::Status Contradiction(const json& s, const std::string& path) {
  if (s == json(false)) return Error(path, "false admits no value");
  if (!s.is_object()) return absl::OkStatus();
  const bool typed = s.contains("type");
  if (typed && s["type"].is_array() && s["type"].empty()) {
    return Error(path + ".type", "no type beside it is also here");
  }
  const bool in_const = s.contains("const"), in_enum = s.contains("enum");
  if (in_const && in_enum && s["enum"].is_array() &&
      std::find(s["enum"].begin(), s["enum"].end(), s["const"]) == s["enum"].end()) {
    return Error(path + ".const", "not a value the enum beside it lists");
  }
  if (!typed || !(in_const || in_enum)) return absl::OkStatus();
  const json values = in_const ? json::array({s["const"]}) : s["enum"];
  if (!values.is_array() || values.empty()) return absl::OkStatus();
  for (const json& v : values) {
    if (OfTypes(v, s["type"])) return absl::OkStatus();
  }
  return Error(path + ".type", absl::StrCat("no ", in_const ? "const" : "enum", " value is of it"));
}

bool OfTypes(const json& v, const json& types) {
  for (const json& t : types.is_array() ? types : json::array({types})) {
    if (t.is_string() && IsOfType(v, t.get<std::string>())) return true;
  }
  return false;
}

}  // namespace llm::constraint::schema
