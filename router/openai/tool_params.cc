#include "router/openai/tool_params.h"

#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "router/openai/body_fields.h"

namespace llm::router::openai {
namespace {

using json = nlohmann::ordered_json;

// Each tool's shape and its function's name (the worker checks the rest: the name's
// characters, the parameters' schema where a call is enforced).
absl::Status ParseTools(const json& body, std::set<std::string>& names, ApiError* e) {
  if (!Present(body, "tools")) return absl::OkStatus();
  const json& tools = body["tools"];
  if (!tools.is_array()) return Bad(e, "tools", "'tools' must be an array");
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string at = absl::StrCat("tools[", i, "]");
    const json& t = tools[i];
    if (!t.is_object() || !t.contains("type") || !Is(t["type"], "function")) {
      return Bad(e, "tools", absl::StrCat("'", at, "' must be {\"type\": \"function\", ...}"));
    }
    if (!t.contains("function") || !t["function"].is_object() || !t["function"].contains("name") ||
        !t["function"]["name"].is_string()) {
      return Bad(e, "tools", absl::StrCat("'", at, ".function.name' must be a string"));
    }
    if (t["function"].contains("parameters") && !t["function"]["parameters"].is_null() &&
        !t["function"]["parameters"].is_object()) {
      return Bad(e, "tools",
                 absl::StrCat("'", at, ".function.parameters' must be a JSON Schema object"));
    }
    if (!names.insert(t["function"]["name"].get<std::string>()).second) {
      return Bad(e, "tools", absl::StrCat("'", at, ".function.name' repeats an earlier tool's"));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseToolChoice(const json& body, const std::set<std::string>& names,
                             llm::v1::ToolChoice& out, ApiError* e) {
  if (!Present(body, "tool_choice")) return absl::OkStatus();
  const json& c = body["tool_choice"];
  if (Is(c, "none")) {
    out.set_mode(llm::v1::ToolChoice::TOOL_CHOICE_NONE);
    return absl::OkStatus();
  }
  if (Is(c, "auto")) return absl::OkStatus();
  if (names.empty()) {
    return Bad(e, "tool_choice", "'tool_choice' other than \"none\" or \"auto\" needs 'tools'");
  }
  if (Is(c, "required")) {
    out.set_mode(llm::v1::ToolChoice::TOOL_CHOICE_REQUIRED);
    return absl::OkStatus();
  }
  if (c.is_object() && c.contains("type") && Is(c["type"], "function") && c.contains("function") &&
      c["function"].is_object() && c["function"].contains("name") &&
      c["function"]["name"].is_string()) {
    const std::string name = c["function"]["name"].get<std::string>();
    if (!names.count(name)) {
      return Bad(e, "tool_choice",
                 absl::StrCat("'tool_choice' names '", name, "', which is not among 'tools'"));
    }
    out.set_mode(llm::v1::ToolChoice::TOOL_CHOICE_FUNCTION);
    out.set_function_name(name);
    return absl::OkStatus();
  }
  return Bad(e, "tool_choice",
             "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
             "\"function\": {\"name\": ...}}");
}

}  // namespace

absl::Status ParseToolParams(const json& body, llm::v1::Chat& chat, ApiError* e) {
  for (const char* key : {"functions", "function_call"}) {
    if (Present(body, key)) {
      return Bad(e, key,
                 absl::StrCat("'", key,
                              "' is deprecated and not supported; send 'tools' and "
                              "'tool_choice'"));
    }
  }
  std::set<std::string> names;
  if (absl::Status st = ParseTools(body, names, e); !st.ok()) return st;
  if (!names.empty()) chat.set_tools_json(body["tools"].dump());
  if (absl::Status st = ParseToolChoice(body, names, *chat.mutable_tool_choice(), e); !st.ok()) {
    return st;
  }
  bool parallel = true;
  auto got = Bool(body, "parallel_tool_calls", &parallel, e);
  if (!got.ok()) return got.status();
  if (*got) chat.set_parallel_tool_calls(parallel);
  return absl::OkStatus();
}

}  // namespace llm::router::openai
