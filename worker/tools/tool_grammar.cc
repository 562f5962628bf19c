#include "worker/tools/tool_grammar.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/constraint/byte_regex.h"
#include "worker/constraint/json_schema.h"

namespace llm::tools {
namespace {

using json = nlohmann::ordered_json;

constexpr size_t kMaxCallsPatternBytes = size_t{2} << 20;

absl::Status Bad(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > kMaxFunctionName) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

absl::StatusOr<Tool> ParseTool(const json& t, const std::string& field) {
  if (!t.is_object()) return Bad(field, "must be an object");
  const auto type = t.find("type");
  if (type == t.end() || *type != "function") {
    return Bad(field + ".type", "must be \"function\"");
  }
  const auto f = t.find("function");
  if (f == t.end() || !f->is_object()) return Bad(field + ".function", "must be an object");
  const auto name = f->find("name");
  if (name == f->end() || !name->is_string() || !ValidName(name->get<std::string>())) {
    return Bad(field + ".function.name",
               absl::StrCat("must be 1 to ", kMaxFunctionName, " of a-z, A-Z, 0-9, _ and -"));
  }
  Tool tool{name->get<std::string>(), nullptr};
  if (const auto p = f->find("parameters"); p != f->end() && !p->is_null()) {
    if (!p->is_object()) return Bad(field + ".function.parameters", "must be a JSON Schema object");
    tool.parameters = *p;
  }
  return tool;
}

// The rules of one tool's argument schema put after those `rules` has: returns its root's
// pattern, calls renumbered.
absl::StatusOr<std::string> Arguments(const Tool& tool, size_t index,
                                      constraint::RulePatterns& rules) {
  if (tool.parameters.is_null()) return std::string("\\{\\}");
  const std::string field = absl::StrCat("tools[", index, "].function.parameters");
  auto schema = constraint::JsonSchemaToPatterns(tool.parameters.dump());
  if (!schema.ok()) {
    // "constraint.json_schema: $.properties.x: why" -> "tools[0].function.parameters.properties
    // .x: why"; "...: #/$defs/X.y: why" -> "tools[0].function.parameters#/$defs/X.y: why".
    std::string message(schema.status().message());
    const std::string_view prefix = "constraint.json_schema: ";
    if (message.starts_with(prefix)) message.erase(0, prefix.size());
    if (message.starts_with("$")) {
      message.erase(0, 1);
    } else if (!message.starts_with("#")) {
      message.insert(0, ": ");
    }
    return absl::InvalidArgumentError(absl::StrCat(field, message));
  }
  // The schema's rules go after those there, but the rule of any JSON value, which the tools
  // share (it calls only itself).
  std::vector<int32_t> to(schema->patterns.size(), -1);  // the root is not called: -1 fails Build
  std::vector<size_t> added;
  for (size_t r = 1; r < schema->patterns.size(); ++r) {
    const bool any = schema->names[r] == constraint::kAnyJsonValueRule;
    const auto shared = std::find(rules.names.begin(), rules.names.end(), schema->names[r]);
    if (any && shared != rules.names.end()) {
      to[r] = static_cast<int32_t>(shared - rules.names.begin());
      continue;
    }
    to[r] = static_cast<int32_t>(rules.names.size());
    rules.names.push_back(any ? schema->names[r] : absl::StrCat(field, schema->names[r]));
    rules.patterns.emplace_back();
    added.push_back(r);
  }
  for (size_t r : added) {
    rules.patterns[static_cast<size_t>(to[r])] = constraint::RenumberCalls(schema->patterns[r], to);
  }
  return constraint::RenumberCalls(schema->patterns[0], to);
}

// One call's JSON object, compact, in the format's key names.
absl::StatusOr<std::string> CallPattern(ToolFormat format, const Tool& tool, size_t index,
                                        constraint::RulePatterns& rules) {
  auto args = Arguments(tool, index, rules);
  if (!args.ok()) return args.status();
  const std::string key = format == ToolFormat::kLlama3Json ? "parameters" : "arguments";
  return absl::StrCat(constraint::EscapeRegex(
                          absl::StrCat("{\"name\":", json(tool.name).dump(), ",\"", key, "\":")),
                      "(", *args, ")\\}");
}

// The answer's pattern in `format`, around `call` (one call, of any tool it may call).
absl::StatusOr<std::string> CallsPattern(ToolFormat format, const std::string& call, bool parallel,
                                         const MarkerRegex& marker) {
  const auto mark = [&](std::string_view m) {
    return marker ? absl::StrCat("(?:", marker(m), ")") : constraint::EscapeRegex(m);
  };
  switch (format) {
    case ToolFormat::kHermes: {
      // As the templates write calls: <tool_call>\n{...}\n</tool_call>, one per line.
      const std::string one =
          absl::StrCat(mark("<tool_call>"), "\\n", call, "\\n", mark("</tool_call>"));
      return parallel ? absl::StrCat(one, "(\\n", one, ")*") : one;
    }
    case ToolFormat::kMistral: {
      const std::string more = parallel ? absl::StrCat("(, ", call, ")*") : "";
      return absl::StrCat(mark("[TOOL_CALLS]"), " \\[", call, more, "\\]");
    }
    case ToolFormat::kGranite: {  // as the model card's examples write them
      const std::string more = parallel ? absl::StrCat("(, ", call, ")*") : "";
      return absl::StrCat(mark("<|tool_call|>"), "\\[", call, more, "\\]");
    }
    case ToolFormat::kJson:  // compact, as the arguments are
      return absl::StrCat("\\[", call, parallel ? absl::StrCat("(,", call, ")*") : "", "\\]");
    case ToolFormat::kLlama3Json:
      return call;
    case ToolFormat::kNone:
      break;
  }
  return Bad("tool_choice", "this worker's model.tool_call_parser is none");
}

}  // namespace

absl::StatusOr<std::vector<Tool>> ParseTools(const json& tools) {
  std::vector<Tool> out;
  if (tools.is_null()) return out;
  if (!tools.is_array()) return Bad("tools", "must be an array");
  std::set<std::string> names;
  for (size_t i = 0; i < tools.size(); ++i) {
    auto tool = ParseTool(tools[i], absl::StrCat("tools[", i, "]"));
    if (!tool.ok()) return tool.status();
    if (!names.insert(tool->name).second) {
      return Bad(absl::StrCat("tools[", i, "].function.name"),
                 absl::StrCat("'", tool->name, "' is named twice"));
    }
    out.push_back(*std::move(tool));
  }
  return out;
}

absl::Status CheckToolChoice(const std::vector<Tool>& tools, const ToolChoice& choice) {
  if (choice.mode == ToolChoice::Mode::kRequired && tools.empty()) {
    return Bad("tool_choice", "\"required\" needs tools");
  }
  if (choice.mode != ToolChoice::Mode::kFunction) return absl::OkStatus();
  for (const Tool& t : tools) {
    if (t.name == choice.function) return absl::OkStatus();
  }
  return Bad("tool_choice", absl::StrCat("names function '", choice.function,
                                         "', which is not among the request's tools"));
}

absl::StatusOr<constraint::RulePatterns> ToolCallPatterns(ToolFormat format,
                                                          const std::vector<Tool>& tools,
                                                          const ToolChoice& choice, bool parallel,
                                                          const MarkerRegex& marker) {
  if (absl::Status st = CheckToolChoice(tools, choice); !st.ok()) return st;
  constraint::RulePatterns rules{{"tool calls"}, {""}, false};
  std::vector<std::string> alternatives;
  size_t bytes = 0;
  for (size_t i = 0; i < tools.size(); ++i) {
    if (choice.mode == ToolChoice::Mode::kFunction && tools[i].name != choice.function) continue;
    const size_t before = rules.patterns.size();
    auto call = CallPattern(format, tools[i], i, rules);
    if (!call.ok()) return call.status();
    // The hermes form repeats the calls' pattern: a quarter of the budget for the tools.
    bytes += call->size();
    for (size_t r = before; r < rules.patterns.size(); ++r) bytes += rules.patterns[r].size();
    if (bytes > kMaxCallsPatternBytes / 4) {
      return Bad("tools",
                 "the calls' grammar expands to more than 2 MiB (too many or too "
                 "large tools for a required call); offer fewer tools");
    }
    alternatives.push_back(absl::StrCat("(", *call, ")"));
  }
  const std::string call = absl::StrCat("(", absl::StrJoin(alternatives, "|"), ")");
  auto root = CallsPattern(format, call, parallel, marker);
  if (!root.ok()) return root.status();
  rules.patterns[0] = *std::move(root);
  rules.calls = rules.patterns.size() > 1;
  return rules;
}

}  // namespace llm::tools
