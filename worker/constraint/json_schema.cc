#include "worker/constraint/json_schema.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/json_depth.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "worker/constraint/byte_regex.h"
#include "worker/constraint/finite_values.h"
#include "worker/constraint/formats.h"
#include "worker/constraint/number_range.h"
#include "worker/constraint/schema_merge.h"
#include "worker/constraint/uri.h"

namespace llm::constraint {
namespace {

using schema::Annotation;
using schema::Beside;
using schema::Contradiction;
using schema::FiniteValues;
using schema::Merged;
using schema::OfTypes;
using json = schema::json;

// The rule of any JSON value, for the values a schema leaves open (`{}`, an object without
// properties, an array without items); a name no reference has.
constexpr const char* kAnyValue = kAnyJsonValueRule;

std::string Group(const std::string& r) { return "(" + r + ")"; }

// Whether some path leads from the automaton's start to its accepting state.
bool Reaches(const ByteNfa& nfa) {
  std::vector<uint8_t> seen(nfa.states.size(), 0);
  std::vector<int32_t> stack = {nfa.start};
  seen[static_cast<size_t>(nfa.start)] = 1;
  while (!stack.empty()) {
    const int32_t s = stack.back();
    stack.pop_back();
    if (s == nfa.accept) return true;
    const NfaState& state = nfa.states[static_cast<size_t>(s)];
    auto visit = [&](int32_t t) {
      if (!seen[static_cast<size_t>(t)]) {
        seen[static_cast<size_t>(t)] = 1;
        stack.push_back(t);
      }
    };
    for (int32_t t : state.eps) visit(t);
    for (const NfaState::Edge& e : state.edges) visit(e.to);
  }
  return false;
}

class Compiler {
 public:
  // A recursive reference is a call (CallMarker) to the target's own pattern (Rule); so is an
  // open value, to kAnyValue's.
  explicit Compiler(const json& root) : root_(root) {}

  // The targets of calls, in the order their calls number them (from 1).
  const std::vector<std::string>& called() const { return called_; }
  // The pattern of `target`'s own rule.
  absl::StatusOr<std::string> Rule(const std::string& target) {
    if (target == kAnyValue) return JsonValueOf(CallTo(kAnyValue));
    auto at = Resolve(target, target);
    if (!at.ok()) return at.status();
    expanding_.assign(1, target);
    return Schema(**at, target, 1);
  }

  absl::StatusOr<std::string> Schema(const json& s, const std::string& path, int depth) {
    // The compiler recurses per level (a hostile schema may nest thousands deep).
    if (++nesting_ > kMaxNesting) return Error(path, "the schema nests more than 64 deep");
    auto r = SchemaAt(s, path, depth);
    --nesting_;
    if (r.ok()) LLM_RETURN_IF_ERROR(Budget(r->size(), path));
    return r;
  }

 private:
  static constexpr int kMaxNesting = 64;
  // A pattern larger than this could not fit the automaton's limits anyway; checked as it
  // grows, so a small schema whose pattern doubles per level fails before memory runs out.
  static constexpr size_t kMaxPatternBytes = size_t{2} << 20;

  static absl::Status Budget(size_t bytes, const std::string& path) {
    if (bytes <= kMaxPatternBytes) return absl::OkStatus();
    return Error(path,
                 "the schema expands to a pattern of more than 2 MiB (nested arrays, "
                 "alternatives and optional properties multiply it); simplify it");
  }

  absl::StatusOr<std::string> SchemaAt(const json& s, const std::string& path, int depth) {
    if (s.is_boolean()) {
      if (s.get<bool>()) return AnyValue();
      return Error(path, "false admits no value");
    }
    if (!s.is_object()) return Error(path, "a schema must be an object or a boolean");
    for (const auto& [key, value] : s.items()) {
      if (!Known(key)) return Error(path + "." + key, "this keyword is not supported");
    }
    if (s.contains("$ref")) return Ref(s, path, depth);
    if (s.contains("const") || s.contains("enum")) return Values(s, path);
    for (const char* key : {"anyOf", "oneOf"}) {
      if (s.contains(key)) return AnyOf(s, key, path, depth);
    }
    if (s.contains("allOf")) {
      const json& all = s["allOf"];
      if (!all.is_array() || all.size() != 1) {
        return Error(path + ".allOf", "only an allOf of one schema is supported");
      }
      auto merged = Merged(all[0], Beside(s, "allOf"), path + ".allOf[0]", "allOf");
      if (!merged.ok()) return merged.status();
      LLM_RETURN_IF_ERROR(Contradiction(*merged, path + ".allOf[0]"));
      return Schema(*merged, path + ".allOf[0]", depth);
    }
    if (!s.contains("type")) {
      if (s.contains("properties") || s.contains("additionalProperties")) {
        return Object(s, path, depth);
      }
      if (s.contains("items")) return Array(s, path, depth);
      return AnyValue();
    }
    const json& type = s["type"];
    if (type.is_string()) return Typed(s, type.get<std::string>(), path, depth);
    if (!type.is_array() || type.empty()) return Error(path + ".type", "a name or a list of names");
    std::vector<std::string> alts;
    size_t bytes = 0;
    for (size_t i = 0; i < type.size(); ++i) {
      if (!type[i].is_string()) return Error(absl::StrCat(path, ".type[", i, "]"), "not a name");
      auto r = Typed(s, type[i].get<std::string>(), absl::StrCat(path), depth);
      if (!r.ok()) return r;
      LLM_RETURN_IF_ERROR(Budget(bytes += r->size() + 3, path));
      alts.push_back(Group(*r));
    }
    return absl::StrJoin(alts, "|");
  }

  static absl::Status Error(const std::string& path, std::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("constraint.json_schema: ", path, ": ", std::string(what)));
  }

  static bool Known(const std::string& key) {
    static const std::set<std::string> known = {"type",
                                                "properties",
                                                "required",
                                                "additionalProperties",
                                                "items",
                                                "prefixItems",
                                                "minItems",
                                                "maxItems",
                                                "uniqueItems",
                                                "propertyNames",
                                                "patternProperties",
                                                "minProperties",
                                                "maxProperties",
                                                "minLength",
                                                "maxLength",
                                                "pattern",
                                                "format",
                                                "minimum",
                                                "maximum",
                                                "exclusiveMinimum",
                                                "exclusiveMaximum",
                                                "multipleOf",
                                                "enum",
                                                "const",
                                                "anyOf",
                                                "oneOf",
                                                "allOf",
                                                "$ref",
                                                "$defs",
                                                "definitions",
                                                "title",
                                                "description",
                                                "default",
                                                "examples",
                                                "$schema",
                                                "$id",
                                                "$comment",
                                                "strict",
                                                "name",
                                                "readOnly",
                                                "writeOnly",
                                                "deprecated",
                                                "discriminator"};
    return known.count(key) > 0;
  }

  static std::string Literal(const json& value) { return EscapeRegex(value.dump()); }

  absl::StatusOr<std::string> Enum(const json& values, const std::string& path) {
    if (!values.is_array() || values.empty()) return Error(path, "a non-empty list of values");
    std::vector<std::string> alts;
    size_t bytes = 0;
    for (const json& v : values) {
      alts.push_back(Group(Literal(v)));
      LLM_RETURN_IF_ERROR(Budget(bytes += alts.back().size() + 1, path));
    }
    return absl::StrJoin(alts, "|");
  }

  // `enum` or `const` (a const beside an enum must be one of its values); a `type` beside them
  // keeps the values of its types.
  absl::StatusOr<std::string> Values(const json& s, const std::string& path) {
    const char* key = s.contains("const") ? "const" : "enum";
    json values = key == std::string("const") ? json::array({s["const"]}) : s["enum"];
    if (!values.is_array() || values.empty()) {
      return Error(path + ".enum", "a non-empty list of values");
    }
    for (const auto& [k, v] : s.items()) {
      if (k == "type" || k == "const" || k == "enum" || Annotation(k)) continue;
      return Error(path + "." + k, absl::StrCat("beside ", key, ": not supported"));
    }
    if (s.contains("const") && s.contains("enum") && !s["enum"].is_array()) {
      return Error(path + ".enum", "a non-empty list of values");
    }
    LLM_RETURN_IF_ERROR(Contradiction(s, path));
    if (s.contains("type")) {
      json kept = json::array();
      for (const json& v : values) {
        if (OfTypes(v, s["type"])) kept.push_back(v);
      }
      values = std::move(kept);
    }
    return Enum(values, absl::StrCat(path, ".", key));
  }

  // s[key] (anyOf or oneOf) as alternatives; the keywords beside it hold in each branch (merged
  // as Merged says). A branch that then admits nothing (Contradiction) is dropped, as it can
  // match no value; where every branch is, the schema is refused.
  absl::StatusOr<std::string> AnyOf(const json& s, const char* key, const std::string& at,
                                    int depth) {
    const json& list = s[key];
    const std::string path = absl::StrCat(at, ".", key);
    if (!list.is_array() || list.empty()) return Error(path, "a non-empty list of schemas");
    const json beside = Beside(s, key);
    std::vector<std::string> alts;
    size_t bytes = 0;
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string branch = absl::StrCat(path, "[", i, "]");
      auto merged = Merged(list[i], beside, branch, key);
      if (!merged.ok()) return merged.status();
      if (auto why = BranchContradiction(*merged, branch); !why.ok()) {
        if (!alts.empty() || i + 1 < list.size()) continue;
        if (i == 0) return why;
        return absl::InvalidArgumentError(
            absl::StrCat(why.message(), " (and every other branch of ", key, " admits none)"));
      }
      auto r = Schema(*merged, branch, depth);
      if (!r.ok()) return r;
      LLM_RETURN_IF_ERROR(Budget(bytes += r->size() + 3, path));
      alts.push_back(Group(*r));
    }
    return absl::StrJoin(alts, "|");
  }

  // Contradiction of a merged branch, or of the targets its $ref chain leads to (none being
  // expanded) with the keywords beside each; any other error is left for Schema to name.
  absl::Status BranchContradiction(const json& s, const std::string& path) {
    LLM_RETURN_IF_ERROR(Contradiction(s, path));
    json at_hop = s;
    std::vector<std::string> seen;
    for (int hop = 0; hop < kMaxRefDepth; ++hop) {
      if (!at_hop.is_object() || !at_hop.contains("$ref") || !at_hop["$ref"].is_string()) break;
      const std::string target = at_hop["$ref"].get<std::string>();
      if (target.empty() || target[0] != '#' ||
          std::count(expanding_.begin(), expanding_.end(), target) > 0 ||
          std::count(seen.begin(), seen.end(), target) > 0) {
        break;
      }
      seen.push_back(target);
      auto at = Resolve(target, path + ".$ref");
      if (!at.ok()) break;
      auto merged = Merged(**at, Beside(at_hop, "$ref"), target, "$ref");
      if (!merged.ok()) break;
      LLM_RETURN_IF_ERROR(Contradiction(*merged, target));
      at_hop = *std::move(merged);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> Ref(const json& s, const std::string& path, int depth) {
    const json& ref = s["$ref"];
    if (!ref.is_string()) return Error(path + ".$ref", "not a string");
    const std::string target = ref.get<std::string>();
    if (depth >= kMaxRefDepth) {
      return Error(path + ".$ref", absl::StrCat("'", target, "': references nest more than ",
                                                kMaxRefDepth, " deep"));
    }
    if (target.empty() || target[0] != '#') {
      return Error(path + ".$ref", absl::StrCat("'", target, "': only local references (#/...)"));
    }
    auto at = Resolve(target, path + ".$ref");
    if (!at.ok()) return at.status();
    const bool recursive = std::count(expanding_.begin(), expanding_.end(), target) > 0;
    const json beside = Beside(s, "$ref");
    if (recursive) {
      if (!beside.empty()) {
        return Error(path + "." + beside.begin().key(), "beside a recursive $ref: not supported");
      }
      return CallTo(target);
    }
    auto merged = Merged(**at, beside, target, "$ref");
    if (!merged.ok()) return merged.status();
    LLM_RETURN_IF_ERROR(Contradiction(*merged, target));
    expanding_.push_back(target);
    auto r = Schema(*merged, target, depth + 1);
    expanding_.pop_back();
    return r;
  }

  // The schema a local reference names; the error names `field`.
  absl::StatusOr<const json*> Resolve(const std::string& target, const std::string& field) {
    try {
      return &root_.at(json::json_pointer(target.substr(1)));
    } catch (const std::exception&) {
      return Error(field, absl::StrCat("'", target, "' names nothing in the schema"));
    }
  }

  absl::StatusOr<std::string> Typed(const json& s, const std::string& type, const std::string& path,
                                    int depth) {
    if (type == "object") return Object(s, path, depth);
    if (type == "array") return Array(s, path, depth);
    if (type == "string") return String(s, path);
    if (type == "integer") return Numeric(s, path, true);
    if (type == "number") return Numeric(s, path, false);
    if (type == "boolean") return std::string("true|false");
    if (type == "null") return std::string("null");
    return Error(path + ".type", absl::StrCat("unknown type '", type, "'"));
  }

  // An object without `properties` (Pydantic's dicts): keys from `propertyNames` (a string
  // schema, or finitely many strings, each then written at most once in the order listed) or
  // from the one pattern of `patternProperties`, else any; values under that pattern's schema
  // or `additionalProperties` (true or absent: any value; false: none); minProperties and
  // maxProperties as counts (with finitely many keys, 0 or 1 and none below their number).
  absl::StatusOr<std::string> Map(const json& s, const std::string& path, int depth) {
    auto min = Count(s, "minProperties", path, 0);
    if (!min.ok()) return min.status();
    auto max = Count(s, "maxProperties", path, -1);
    if (!max.ok()) return max.status();
    if (*max >= 0 && *max < *min) return Error(path + ".maxProperties", "below minProperties");
    json values = s.value("additionalProperties", json(true));
    std::string key = JsonStringRegex(), values_path = path + ".additionalProperties";
    if (s.contains("patternProperties")) {
      const json& by_pattern = s["patternProperties"];
      if (!by_pattern.is_object() || by_pattern.size() != 1 || s.contains("propertyNames")) {
        return Error(path + ".patternProperties",
                     "one pattern is supported, without propertyNames");
      }
      values_path = path + ".patternProperties." + by_pattern.begin().key();
      auto content = Pattern(json(by_pattern.begin().key()), values_path, true);
      if (!content.ok()) return content.status();
      key = absl::StrCat("\"", *content, "\"");
      values = by_pattern.begin().value();
    }
    const bool plain = !s.contains("propertyNames") && !s.contains("patternProperties");
    if (values == json(true) && plain && *min == 0 && *max < 0) return JsonObjectOf(AnyValue());
    if (values == json(false)) {
      if (*min > 0) return Error(path + ".minProperties", "no property is allowed");
      return std::string("\\{\\}");
    }
    auto value = values == json(true) ? absl::StatusOr<std::string>(AnyValue())
                                      : Schema(values, values_path, depth);
    if (!value.ok()) return value;
    if (s.contains("propertyNames")) {
      auto names = PropertyNames(s["propertyNames"], path + ".propertyNames", depth);
      if (!names.ok()) return names.status();
      if (names->finite) {
        std::vector<std::string> members;
        for (const std::string& k : names->keys)
          members.push_back(absl::StrCat(k, ":(", *value, ")"));
        auto body = OrderedSubsets(members, *min, *max, path, "Properties");
        if (!body.ok()) return body;
        return absl::StrCat("\\{", *body, "\\}");
      }
      key = names->keys.front();
    }
    return absl::StrCat("\\{", Repeated(absl::StrCat(key, ":(", *value, ")"), *min, *max), "\\}");
  }

  // The keys `propertyNames` admits: finitely many strings (each a literal), or one regex of
  // a string schema.
  struct Keys {
    bool finite = false;
    std::vector<std::string> keys;
  };
  absl::StatusOr<Keys> PropertyNames(const json& names, const std::string& path, int depth) {
    auto r = Schema(names, path, depth);  // its keywords checked, and a string schema's regex
    if (!r.ok()) return r.status();
    int calls = 10000;
    if (auto values = FiniteValues(names, root_, depth, calls); values && !values->empty()) {
      Keys k{true, {}};
      for (const json& v : *values) {
        if (!v.is_string()) return Error(path, absl::StrCat(v.dump(), " is not a string"));
        k.keys.push_back(Group(Literal(v)));
      }
      return k;
    }
    // Keys are JSON strings: a schema whose alternatives could admit another value is refused.
    const bool string_schema = names.is_object() && names.value("type", json()) == json("string") &&
                               !names.contains("anyOf") && !names.contains("oneOf") &&
                               !names.contains("allOf") && !names.contains("$ref");
    if (!string_schema) {
      return Error(path,
                   "a string schema (type string, without anyOf, oneOf, allOf or $ref), or a "
                   "finite set of strings, is supported");
    }
    return Keys{false, {Group(*r)}};
  }

  // Each of `members` at most once, in order, comma separated: n alternatives by which comes
  // first. Counts: `min` 0 or 1, `max` none or at least n (`what`: "Items", "Properties").
  absl::StatusOr<std::string> OrderedSubsets(const std::vector<std::string>& members, int64_t min,
                                             int64_t max, const std::string& path,
                                             const char* what) {
    const auto n = static_cast<int64_t>(members.size());
    if (min > 1 || (max >= 0 && max < n)) {
      return Error(absl::StrCat(path, min > 1 ? ".min" : ".max", what),
                   absl::StrCat("where each of ", n,
                                " values may appear once, served for 0 or 1 at least "
                                "and none or at least ",
                                n, " at most"));
    }
    std::vector<std::string> alts;
    size_t bytes = 0;
    for (size_t first = 0; first < members.size(); ++first) {
      std::string r = Group(members[first]);
      for (size_t j = first + 1; j < members.size(); ++j) {
        absl::StrAppend(&r, "(,", Group(members[j]), ")?");
      }
      LLM_RETURN_IF_ERROR(Budget(bytes += r.size() + 1, path));
      alts.push_back(r);
    }
    return absl::StrCat(Group(absl::StrJoin(alts, "|")), min == 0 ? "?" : "");
  }

  absl::StatusOr<std::string> Object(const json& s, const std::string& path, int depth) {
    if (!s.contains("properties")) return Map(s, path, depth);
    for (const char* key :
         {"propertyNames", "patternProperties", "minProperties", "maxProperties"}) {
      if (s.contains(key)) {
        return Error(path + "." + key, "supported on an object without properties");
      }
    }
    const json& props = s["properties"];
    if (!props.is_object()) return Error(path + ".properties", "not an object");
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) return Error(path + ".required", "not a list");
      for (const json& r : s["required"]) {
        if (!r.is_string() || !props.contains(r.get<std::string>())) {
          return Error(path + ".required", absl::StrCat(r.dump(), " is not a property"));
        }
        required.insert(r.get<std::string>());
      }
    }
    struct Member {
      std::string regex;
      bool required;
    };
    std::vector<Member> members;
    for (const auto& [key, schema] : props.items()) {
      auto v = Schema(schema, path + ".properties." + key, depth);
      if (!v.ok()) return v;
      members.push_back({absl::StrCat(Literal(json(key)), ":(", *v, ")"), required.count(key) > 0});
    }
    // Alternatives by which member comes first: members before it must be optional.
    std::vector<std::string> alts;
    size_t bytes = 0;
    for (size_t first = 0; first < members.size(); ++first) {
      std::string r = members[first].regex;
      for (size_t j = first + 1; j < members.size(); ++j) {
        LLM_RETURN_IF_ERROR(Budget(bytes += members[j].regex.size() + 5, path));
        absl::StrAppend(&r, members[j].required ? "," : "(,", members[j].regex,
                        members[j].required ? "" : ")?");
      }
      alts.push_back(Group(r));
      if (members[first].required) break;
    }
    const bool all_optional =
        std::none_of(members.begin(), members.end(), [](const Member& m) { return m.required; });
    const std::string body = alts.empty() ? "" : Group(absl::StrJoin(alts, "|"));
    return absl::StrCat("\\{", body, all_optional && !alts.empty() ? "?" : "", "\\}");
  }

  // A count (minItems, maxLength, ...) of at most `limit`.
  absl::StatusOr<int64_t> Count(const json& s, const char* key, const std::string& path,
                                int64_t fallback, int64_t limit = 1000) {
    if (!s.contains(key)) return fallback;
    const json& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0) {
      return Error(path + "." + key, "a non-negative integer");
    }
    if (v.get<int64_t>() > limit) {
      return Error(path + "." + key, absl::StrCat("above ", limit, " is not supported"));
    }
    return v.get<int64_t>();
  }

  // `item` repeated min..max times (max -1: unbounded), comma separated.
  static std::string Repeated(const std::string& item, int64_t min, int64_t max) {
    if (max == 0) return "";
    const std::string more = absl::StrCat("(,(", item, "))");
    const int64_t rest_min = std::max<int64_t>(min - 1, 0);
    const std::string tail = max < 0 ? absl::StrCat(more, "{", rest_min, ",}")
                                     : absl::StrCat(more, "{", rest_min, ",", max - 1, "}");
    const std::string some = absl::StrCat("(", item, ")", tail);
    return min == 0 ? Group(some) + "?" : some;
  }

  // An array of `prefixItems`, closed by `items: false` or by a maxItems within the prefix
  // (as Pydantic writes a tuple): the first minItems required, the rest optional in order.
  absl::StatusOr<std::string> Tuple(const json& s, const std::string& path, int depth, int min,
                                    int max) {
    const json& prefix = s["prefixItems"];
    if (!prefix.is_array()) return Error(path + ".prefixItems", "not a list");
    const int n = static_cast<int>(prefix.size());
    const bool closed = s.contains("items") && s["items"] == json(false);
    if (!closed && (max < 0 || max > n)) {
      return Error(path + ".prefixItems",
                   "supported with items: false, or a maxItems of at most its length");
    }
    const int last = max < 0 ? n : std::min(n, max);
    if (min > last) return Error(path + ".minItems", "more than the prefixItems allow");
    std::vector<std::string> parts;
    for (int i = 0; i < last; ++i) {
      auto r = Schema(prefix[i], absl::StrCat(path, ".prefixItems[", i, "]"), depth);
      if (!r.ok()) return r;
      parts.push_back(Group(*r));
    }
    // From the last item back: item i, then the rest; optional from item `min` on.
    std::string rest;
    for (int i = last - 1; i >= 0; --i) {
      const std::string here = (i > 0 ? "," : "") + parts[i] + rest;
      rest = i >= min ? Group(here) + "?" : here;
    }
    return absl::StrCat("\\[", rest, "\\]");
  }

  // `uniqueItems: true` over items of finitely many values (FiniteValues: Pydantic's
  // set[SomeEnum], set[Literal[...]]): each value at most once, in the order the schema lists
  // them. A set's order carries nothing, and in that order the language is n alternatives
  // instead of n! orders. Bounds: minItems of 0 or 1, maxItems none or at least n.
  absl::StatusOr<std::string> Set(const json& s, const std::string& path, int depth, int64_t min,
                                  int64_t max) {
    // The items' schema is checked as any other (its keywords known, its values valid).
    if (s.contains("items")) {
      if (auto r = Schema(s["items"], path + ".items", depth); !r.ok()) return r.status();
    }
    int calls = 10000;
    const std::optional<std::vector<json>> values =
        s.contains("prefixItems") ? std::nullopt
                                  : FiniteValues(s.value("items", json()), root_, depth, calls);
    if (!values || values->empty()) {
      return Error(path + ".uniqueItems",
                   "served where the items are a finite set of values (at most 256: enum, "
                   "const, boolean, "
                   "or $ref and anyOf of those): no automaton can tell apart arrays of "
                   "unbounded values");
    }
    std::vector<std::string> items;
    for (const json& v : *values) items.push_back(Literal(v));
    auto body = OrderedSubsets(items, min, max, path, "Items");
    if (!body.ok()) return body;
    return absl::StrCat("\\[", *body, "\\]");
  }

  absl::StatusOr<std::string> Array(const json& s, const std::string& path, int depth) {
    auto min = Count(s, "minItems", path, 0);
    if (!min.ok()) return min.status();
    auto max = Count(s, "maxItems", path, -1);
    if (!max.ok()) return max.status();
    if (*max >= 0 && *max < *min) return Error(path + ".maxItems", "below minItems");
    if (s.contains("uniqueItems")) {
      if (!s["uniqueItems"].is_boolean()) return Error(path + ".uniqueItems", "true or false");
      if (s["uniqueItems"].get<bool>()) return Set(s, path, depth, *min, *max);
    }
    if (s.contains("prefixItems")) return Tuple(s, path, depth, *min, *max);
    auto item = s.contains("items") ? Schema(s["items"], path + ".items", depth)
                                    : absl::StatusOr<std::string>(AnyValue());
    if (!item.ok()) return item;
    return absl::StrCat("\\[", Repeated(*item, *min, *max), "\\]");
  }

  absl::StatusOr<std::string> String(const json& s, const std::string& path) {
    auto min = Count(s, "minLength", path, 0);
    if (!min.ok()) return min.status();
    const bool uri = s.contains("format") && s["format"] == "uri";
    auto max = Count(s, "maxLength", path, -1, uri ? int64_t{1} << 30 : 1000);
    if (!max.ok()) return max.status();
    if (*max >= 0 && *max < *min) return Error(path + ".maxLength", "below minLength");
    const bool lengths = s.contains("minLength") || s.contains("maxLength");
    if (s.contains("format") && s.contains("pattern")) {
      return Error(path + ".pattern", "a pattern together with a format is not supported");
    }
    if (uri) return Uri(path, *min, *max);
    const std::string count =
        *max < 0 ? absl::StrCat("{", *min, ",}") : absl::StrCat("{", *min, ",", *max, "}");
    // Formats that say how a program reads the string, not what it may hold (Pydantic's bytes,
    // SecretStr and Path) leave it any string.
    const bool free_format =
        s.contains("format") &&
        (s["format"] == "binary" || s["format"] == "password" || s["format"] == "path");
    if ((!s.contains("format") || free_format) && !s.contains("pattern")) {
      return absl::StrCat("\"", kJsonStringChar, count, "\"");
    }
    auto body = s.contains("format") ? schema::FormatRegex(s["format"], path + ".format")
                                     : Pattern(s["pattern"], path + ".pattern", !lengths);
    if (!body.ok()) return body.status();
    if (!lengths) return absl::StrCat("\"", *body, "\"");
    // A format's or a pattern's content writes no escape, so each of its characters is one
    // UTF-8 character, which a length group counts (byte_regex.h).
    const std::string name = s.contains("format") ? s["format"].get<std::string>() : "";
    const int fixed = name == "date" ? 10 : name == "uuid" ? 36 : -1;
    if (fixed >= 0 && (fixed < *min || (*max >= 0 && fixed > *max))) {
      return Error(path + (s.contains("maxLength") ? ".maxLength" : ".minLength"),
                   absl::StrCat("no ", name, " is within the length bounds"));
    }
    return absl::StrCat("\"(?", count, *body, ")\"");
  }

  // format "uri" (uri.h): a minLength the shortest URL meets, and a maxLength that bounds its
  // parts.
  static absl::StatusOr<std::string> Uri(const std::string& path, int64_t min, int64_t max) {
    if (min > kMinUriLength) {
      return Error(path + ".minLength",
                   absl::StrCat("with format \"uri\", at most ", kMinUriLength,
                                " (the length of the shortest URL, http://a) is supported"));
    }
    auto body = UriRegex(max < 0 ? std::nullopt : std::optional<int>(static_cast<int>(max)));
    if (!body.ok()) return Error(path + ".maxLength", std::string(body.status().message()));
    return absl::StrCat("\"", *body, "\"");
  }

  // A string pattern's content (quotes not included): what it matches, anywhere in the string
  // unless anchored; the text around an unanchored match writes no escape unless `escapes`.
  absl::StatusOr<std::string> Pattern(const json& p, const std::string& path, bool escapes) {
    if (!p.is_string()) return Error(path, "not a string");
    std::string body = p.get<std::string>();
    const bool start = !body.empty() && body.front() == '^';
    const bool end = body.size() > 1 && body.back() == '$' && body[body.size() - 2] != '\\';
    if (start) body.erase(0, 1);
    if (end) body.pop_back();
    auto nfa = ParseRegex(body, "constraint.json_schema: " + path);
    if (!nfa.ok()) return nfa.status();
    // The pattern is matched against the string's content as written, where a quote, a
    // backslash or a control character would end or break the string: its text without them
    // (a JSON text group: `\s` is a space there, `.` no quote). A pattern that needs one has
    // nothing left.
    body = absl::StrCat("(?~", body, ")");
    nfa = ParseRegex(body, "constraint.json_schema: " + path, /*extensions=*/true);
    if (!nfa.ok()) return nfa.status();
    if (!Reaches(*nfa)) {
      return Error(path,
                   "the pattern matches only text with a quote, a backslash or a control "
                   "character, which JSON escapes");
    }
    const std::string any = escapes ? absl::StrCat(kJsonStringChar, "*") : R"([^"\\\x00-\x1f]*)";
    return absl::StrCat(start ? "" : any, "(", body, ")", end ? "" : any);
  }

  // A bound as the decimal the schema writes (number_range.h), within +-10^15.
  absl::StatusOr<std::optional<NumberBound>> Bound(const json& s, const char* key,
                                                   const std::string& path) {
    if (!s.contains(key)) return std::optional<NumberBound>();
    const json& v = s[key];
    if (!v.is_number() || std::abs(v.get<double>()) > 1e15) {
      return Error(path + "." + key, "a number within +-10^15");
    }
    // An integer as written; a float at its shortest digits.
    auto d = v.is_number_integer() ? ParseDecimal(v.dump()) : DecimalOf(v.get<double>());
    if (!d.ok()) return Error(path + "." + key, std::string(d.status().message()));
    const bool exclusive = std::string_view(key).starts_with("exclusive");
    return std::optional<NumberBound>(NumberBound{*d, exclusive});
  }

  // The tighter bound of a side (lower: minimum, exclusiveMinimum; upper: maximum,
  // exclusiveMaximum); nullopt when neither is given.
  absl::StatusOr<std::optional<NumberBound>> SideBound(const json& s, bool lower,
                                                       const std::string& path) {
    std::optional<NumberBound> out;
    for (const char* key : lower ? std::vector<const char*>{"minimum", "exclusiveMinimum"}
                                 : std::vector<const char*>{"maximum", "exclusiveMaximum"}) {
      auto b = Bound(s, key, path);
      if (!b.ok()) return b.status();
      if (!*b) continue;
      const int c = out ? Compare((*b)->value, out->value) : 0;
      const bool tighter = !out || (lower ? c > 0 : c < 0) || (c == 0 && (*b)->exclusive);
      if (tighter) out = *b;
    }
    return out;
  }

  // Integers and numbers within their bounds (number_range.h), multiples of `multipleOf`
  // where it is given.
  absl::StatusOr<std::string> Numeric(const json& s, const std::string& path, bool integer) {
    auto lo = SideBound(s, true, path);
    if (!lo.ok()) return lo.status();
    auto hi = SideBound(s, false, path);
    if (!hi.ok()) return hi.status();
    if (s.contains("multipleOf")) {
      auto step = Bound(s, "multipleOf", path);
      if (!step.ok()) return step.status();
      auto m = MultiplesRegex(*lo, *hi, (*step)->value, integer);
      if (!m.ok()) return Error(path + ".multipleOf", std::string(m.status().message()));
      if (m->empty()) return Error(path + ".multipleOf", "no multiple is within the bounds");
      return *m;
    }
    const auto [from, to] = IntegerBounds(*lo, *hi);
    const std::string r = integer ? IntegerRangeRegex(from, to) : NumberRangeRegex(*lo, *hi);
    if (r.empty()) {
      return Error(path + ".maximum",
                   integer ? "no integer is within the bounds" : "no number is within the bounds");
    }
    return r;
  }

  // A call to `target`'s rule, numbered at its first call.
  std::string CallTo(const std::string& target) {
    size_t index = std::find(called_.begin(), called_.end(), target) - called_.begin();
    if (index == called_.size()) called_.push_back(target);
    return CallMarker(static_cast<int32_t>(index) + 1);
  }
  std::string AnyValue() { return CallTo(kAnyValue); }

  const json& root_;
  int nesting_ = 0;
  std::vector<std::string> expanding_;  // the references being expanded, outermost first
  std::vector<std::string> called_;
};

}  // namespace

namespace {

// The schema document, checked before anything recurses over it (the compiler, dump).
absl::StatusOr<json> ParseSchema(std::string_view schema) {
  json root = json::parse(schema, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) {
    return absl::InvalidArgumentError("constraint.json_schema: not valid JSON");
  }
  if (JsonNestsDeeperThan(root, kMaxJsonNesting)) {
    return absl::InvalidArgumentError(
        absl::StrCat("constraint.json_schema: $: nests deeper than ", kMaxJsonNesting, " levels"));
  }
  return root;
}

}  // namespace

absl::StatusOr<RulePatterns> JsonSchemaToPatterns(std::string_view schema) {
  auto parsed = ParseSchema(schema);
  if (!parsed.ok()) return parsed.status();
  const json& root = *parsed;
  Compiler compiler(root);
  auto top = compiler.Schema(root, "$", 0);
  if (!top.ok()) return top.status();
  RulePatterns out{{"$"}, {*std::move(top)}, false};
  size_t total = out.patterns[0].size();
  for (size_t i = 0; i < compiler.called().size(); ++i) {  // grows as rules call new targets
    const std::string target = compiler.called()[i];
    auto p = compiler.Rule(target);
    if (!p.ok()) return p.status();
    if ((total += p->size()) > (size_t{2} << 20)) {
      return absl::InvalidArgumentError(
          "constraint.json_schema: $: the schema expands to a pattern of more than 2 MiB");
    }
    out.names.push_back(target);
    out.patterns.push_back(*std::move(p));
  }
  // A rule whose every call a bound left out (`maxItems: 0`) is not compiled.
  return DropUncalledRules(std::move(out));
}

}  // namespace llm::constraint
