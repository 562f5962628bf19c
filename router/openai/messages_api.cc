// ParseMessagesRequest (messages_api.h): a /v1/messages body -> the chat request it means. The
// body's own shapes (content blocks, tools with input_schema, tool_choice objects) are checked
// and translated here, naming their fields; the translated chat body then goes through the
// chat parser, so sampling, stops and tools are checked by one piece of code.
#include "router/openai/messages_api.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/status_macros.h"
#include "router/openai/body_fields.h"
#include "router/openai/reference_fields.h"

namespace llm::router::openai {
namespace {

using json = nlohmann::ordered_json;

// Fields passed to the chat parser as they are: the API's own sampling fields, and the
// extensions a chat request takes (vLLM's Messages API takes them too).
constexpr const char* kPassed[] = {"model",
                                   "temperature",
                                   "top_p",
                                   "top_k",
                                   "stream",
                                   "seed",
                                   "min_p",
                                   "repetition_penalty",
                                   "presence_penalty",
                                   "frequency_penalty",
                                   "ignore_eos",
                                   "speculative",
                                   "chat_template_kwargs",
                                   "skip_special_tokens",
                                   "include_stop_str_in_output",
                                   "stop_token_ids"};

// Fields read here (translated, refused or ignored).
constexpr const char* kRead[] = {
    "max_tokens",    "messages",     "system",          "stop_sequences", "metadata",
    "tools",         "tool_choice",  "thinking",        "output_config",  "output_format",
    "cache_control", "service_tier", "container",       "mcp_servers",    "inference_geo",
    "speed",         "diagnostics",  "user_profile_id", "workspace_id",   "context_management"};

// Hints with nothing to act on here: one service tier, one region, one speed, no workspaces,
// and a prefix cache that needs no markers. Logged once, then ignored.
constexpr const char* kIgnored[] = {"cache_control", "service_tier",      "inference_geo",
                                    "speed",         "diagnostics",       "user_profile_id",
                                    "workspace_id",  "context_management"};

bool Known(const std::string& key) {
  static const std::set<std::string> known = [] {
    std::set<std::string> k(std::begin(kPassed), std::end(kPassed));
    k.insert(std::begin(kRead), std::end(kRead));
    return k;
  }();
  return known.count(key) > 0;
}

absl::Status Required(const json& j, const std::string& at, const char* key, ApiError* e) {
  if (!j.contains(key) || !j[key].is_string()) {
    return Bad(e, absl::StrCat(at, ".", key),
               absl::StrCat("'", at, ".", key, "' is required and must be a string"));
  }
  return absl::OkStatus();
}

// A block's `type`, checked.
absl::StatusOr<std::string> BlockType(const json& block, const std::string& at, ApiError* e) {
  if (!block.is_object() || !block.contains("type") || !block["type"].is_string()) {
    return Bad(e, at, absl::StrCat("'", at, "' must be an object with a 'type'"));
  }
  return block["type"].get<std::string>();
}

// A string, or text blocks (joined by the chat parser): `system`, a system message, a
// tool_result's content.
absl::StatusOr<json> TextOnly(const json& content, const std::string& at, ApiError* e) {
  if (content.is_string()) return content;
  if (!content.is_array()) {
    return Bad(e, at, absl::StrCat("'", at, "' must be a string or an array of text blocks"));
  }
  json parts = json::array();
  for (size_t j = 0; j < content.size(); ++j) {
    const std::string p = absl::StrCat(at, "[", j, "]");
    LLM_ASSIGN_OR_RETURN(const std::string type, BlockType(content[j], p, e));
    if (type != "text") {
      return Bad(e, p + ".type",
                 absl::StrCat("block type '", type, "' is not supported here (text only)"));
    }
    LLM_RETURN_IF_ERROR(Required(content[j], p, "text", e));
    parts.push_back({{"type", "text"}, {"text", content[j]["text"]}});
  }
  return parts;
}

// The chat messages being built, and the role of the Messages turn each came from.
struct Turns {
  json messages = json::array();
  std::string last_role;  // of the last turn added
  // The next text block joins the last text part: an assistant turn's blocks are one text, as
  // the model wrote them (a prefill is continued after exactly that text). The chat parser
  // puts a newline between parts: between a user's blocks, and between merged turns.
  bool join = false;
};

// The last chat message if it has `role` and came from a turn of that role (consecutive
// turns of one role are one turn, as the API says); else a new one.
json& Open(Turns& t, const std::string& role) {
  if (t.messages.empty() || !Is(t.messages.back()["role"], role) || t.last_role != role) {
    t.messages.push_back({{"role", role}, {"content", json::array()}});
  }
  t.last_role = role;
  return t.messages.back();
}

void AddText(Turns& t, const std::string& role, const json& text) {
  json& content = Open(t, role)["content"];
  if (t.join && !content.empty()) {
    content.back()["text"] = content.back()["text"].get<std::string>() + text.get<std::string>();
  } else {
    content.push_back({{"type", "text"}, {"text", text}});
  }
  t.join = role == "assistant";
}

// A tool_result block: a tool message (is_error: its text says so).
absl::Status ToolResult(const json& block, const std::string& at, Turns& t, ApiError* e) {
  LLM_RETURN_IF_ERROR(Required(block, at, "tool_use_id", e));
  json content = "";
  if (Present(block, "content")) {
    LLM_ASSIGN_OR_RETURN(content, TextOnly(block["content"], at + ".content", e));
  }
  bool error = false;
  if (Present(block, "is_error")) {
    if (!block["is_error"].is_boolean()) {
      return Bad(e, at + ".is_error", absl::StrCat("'", at, ".is_error' must be true or false"));
    }
    error = block["is_error"].get<bool>();
  }
  if (error) {
    json parts = json::array({{{"type", "text"}, {"text", "Error:"}}});
    if (content.is_string()) {
      parts.push_back({{"type", "text"}, {"text", content}});
    } else {
      for (auto& p : content) parts.push_back(std::move(p));
    }
    content = std::move(parts);
  }
  t.messages.push_back(
      {{"role", "tool"}, {"tool_call_id", block["tool_use_id"]}, {"content", std::move(content)}});
  t.last_role = "user";  // the user's turn goes on: its text joins no earlier user message
  return absl::OkStatus();
}

// A tool_use block: a call of the assistant's message.
absl::Status ToolUse(const json& block, const std::string& at, Turns& t, ApiError* e) {
  LLM_RETURN_IF_ERROR(Required(block, at, "id", e));
  LLM_RETURN_IF_ERROR(Required(block, at, "name", e));
  if (!block.contains("input") || !block["input"].is_object()) {
    return Bad(e, at + ".input", absl::StrCat("'", at, ".input' must be an object"));
  }
  json& m = Open(t, "assistant");
  if (!m.contains("tool_calls")) m["tool_calls"] = json::array();
  m["tool_calls"].push_back(
      {{"id", block["id"]},
       {"type", "function"},
       {"function", {{"name", block["name"]}, {"arguments", block["input"].dump()}}}});
  return absl::OkStatus();
}

// One block of a user or assistant turn.
absl::Status AddBlock(const json& block, const std::string& at, const std::string& role, Turns& t,
                      ApiError* e) {
  LLM_ASSIGN_OR_RETURN(const std::string type, BlockType(block, at, e));
  if (type == "text") {
    LLM_RETURN_IF_ERROR(Required(block, at, "text", e));
    AddText(t, role, block["text"]);
  } else if (type == "tool_use" && role == "assistant") {
    t.join = false;
    LLM_RETURN_IF_ERROR(ToolUse(block, at, t, e));
  } else if (type == "tool_result" && role == "user") {
    t.join = false;
    LLM_RETURN_IF_ERROR(ToolResult(block, at, t, e));
  } else if (type == "tool_use" || type == "tool_result") {
    return Bad(e, at + ".type",
               absl::StrCat("a '", type, "' block belongs in ",
                            type == "tool_use" ? "an assistant" : "a user", " message"));
  } else if (type == "thinking" && role == "assistant" && block.contains("thinking") &&
             block["thinking"].is_string()) {
    // The model's own thinking, back: its message's reasoning_content (a template may render it).
    json& m = Open(t, role);
    const std::string before =
        m.contains("reasoning_content") ? m["reasoning_content"].get<std::string>() : "";
    m["reasoning_content"] = before + block["thinking"].get<std::string>();
  } else if (type != "thinking" && type != "redacted_thinking") {
    // A redacted thinking block is nothing to render.
    return Bad(e, at + ".type",
               absl::StrCat("content block type '", type,
                            "' is not supported (text, tool_use, tool_result, thinking)"));
  }
  return absl::OkStatus();
}

// One turn of `messages`.
absl::Status AddTurn(const json& turn, const std::string& at, Turns& t, ApiError* e) {
  if (!turn.is_object()) return Bad(e, at, absl::StrCat("'", at, "' must be an object"));
  LLM_RETURN_IF_ERROR(Required(turn, at, "role", e));
  const std::string role = turn["role"].get<std::string>();
  if (role != "user" && role != "assistant" && role != "system") {
    return Bad(
        e, at + ".role",
        absl::StrCat("'", at, ".role' is '", role, "'; it must be user, assistant or system"));
  }
  if (!turn.contains("content")) {
    return Bad(e, at + ".content", absl::StrCat("'", at, ".content' is required"));
  }
  const json& content = turn["content"];
  t.join = false;  // a new turn's text is a new part
  if (role == "system") {
    LLM_ASSIGN_OR_RETURN(json text, TextOnly(content, at + ".content", e));
    t.messages.push_back({{"role", "system"}, {"content", std::move(text)}});
    t.last_role = "system";
  } else if (content.is_string()) {
    AddText(t, role, content);
  } else if (content.is_array()) {
    if (content.empty()) Open(t, role);  // an empty turn is still a turn
    for (size_t j = 0; j < content.size(); ++j) {
      LLM_RETURN_IF_ERROR(AddBlock(content[j], absl::StrCat(at, ".content[", j, "]"), role, t, e));
    }
  } else {
    return Bad(e, at + ".content",
               absl::StrCat("'", at, ".content' must be a string or an array of blocks"));
  }
  return absl::OkStatus();
}

// A final assistant turn is a prefill: the answer continues it. As the API requires, it has
// text only (a call cannot be continued), no trailing whitespace, and no output format or
// forced tool call (whose grammar would start over after it). One without text is no prefill
// (an empty one is dropped; one of thinking blocks only added no message).
absl::Status Prefill(const json& body, json& chat, ApiError* e) {
  const json& turns = body["messages"];
  const json& last = turns.back();
  json& messages = chat["messages"];
  const json& m = messages.back();
  if (!Is(last["role"], "assistant") || !Is(m["role"], "assistant")) return absl::OkStatus();
  const std::string at = absl::StrCat("messages[", turns.size() - 1, "]");
  if (m.contains("tool_calls")) {
    return Bad(e, at,
               absl::StrCat("'", at, "' is the last message, an assistant's with a ",
                            "tool_use: it cannot be continued; send its tool_result"));
  }
  std::string text;
  for (const json& p : m["content"]) text += p["text"].get<std::string>();
  if (text.empty()) {
    if (messages.size() > 1) messages.erase(messages.size() - 1);
    return absl::OkStatus();
  }
  if (std::isspace(static_cast<unsigned char>(text.back()))) {
    return Bad(e, at + ".content", "final assistant content cannot end with trailing whitespace");
  }
  const json* choice = Present(body, "tool_choice") ? &body["tool_choice"] : nullptr;
  const bool forced = choice != nullptr && choice->is_object() &&
                      (Is((*choice)["type"], "any") || Is((*choice)["type"], "tool"));
  const bool format = Present(body, "output_format") ||
                      (Present(body, "output_config") && body["output_config"].is_object() &&
                       Present(body["output_config"], "format"));
  if (forced || format) {
    return Bad(e, at,
               absl::StrCat("'", at, "' is a prefill, which cannot be combined with ",
                            forced ? "tool_choice any or tool" : "an output format"));
  }
  chat["continue_final_message"] = true;
  chat["add_generation_prompt"] = false;
  return absl::OkStatus();
}

// `system` (a system message first) and `messages`.
absl::Status Messages(const json& body, json& chat, ApiError* e) {
  Turns t;
  if (Present(body, "system")) {
    LLM_ASSIGN_OR_RETURN(json text, TextOnly(body["system"], "system", e));
    t.messages.push_back({{"role", "system"}, {"content", std::move(text)}});
    t.last_role = "system";
  }
  if (!Present(body, "messages")) return Bad(e, "messages", "'messages' is required");
  const json& turns = body["messages"];
  if (!turns.is_array() || turns.empty()) {
    return Bad(e, "messages", "'messages' must be a non-empty array");
  }
  for (size_t i = 0; i < turns.size(); ++i) {
    LLM_RETURN_IF_ERROR(AddTurn(turns[i], absl::StrCat("messages[", i, "]"), t, e));
  }
  for (json& m : t.messages) {  // a turn of calls only: no content
    if (Is(m["role"], "assistant") && m["content"].empty()) m["content"] = nullptr;
  }
  chat["messages"] = std::move(t.messages);
  return Prefill(body, chat, e);
}

// tools (custom tools -> chat's {"type": "function", "function": {...}}) and tool_choice.
absl::Status Tools(const json& body, json& chat, ApiError* e) {
  if (Present(body, "tools")) {
    const json& tools = body["tools"];
    if (!tools.is_array()) return Bad(e, "tools", "'tools' must be an array");
    json out = json::array();
    for (size_t i = 0; i < tools.size(); ++i) {
      const std::string at = absl::StrCat("tools[", i, "]");
      const json& tool = tools[i];
      if (!tool.is_object()) return Bad(e, at, absl::StrCat("'", at, "' must be an object"));
      if (Present(tool, "type") && !Is(tool["type"], "custom")) {
        return Bad(e, at + ".type",
                   absl::StrCat("tool type ",
                                tool["type"].is_string() ? tool["type"].get<std::string>()
                                                         : tool["type"].dump(),
                                " is a server tool, not supported here (custom tools only)"));
      }
      LLM_RETURN_IF_ERROR(Required(tool, at, "name", e));
      if (!tool.contains("input_schema") || !tool["input_schema"].is_object()) {
        return Bad(e, at + ".input_schema",
                   absl::StrCat("'", at, ".input_schema' is required and must be an object"));
      }
      json function = {{"name", tool["name"]}, {"parameters", tool["input_schema"]}};
      for (const char* key : {"description", "strict"}) {
        if (tool.contains(key)) function[key] = tool[key];
      }
      out.push_back({{"type", "function"}, {"function", std::move(function)}});
    }
    chat["tools"] = std::move(out);
  }
  if (!Present(body, "tool_choice")) return absl::OkStatus();
  const json& c = body["tool_choice"];
  if (!c.is_object() || !c.contains("type") || !c["type"].is_string()) {
    return Bad(e, "tool_choice", "'tool_choice' must be an object with a 'type'");
  }
  const std::string type = c["type"].get<std::string>();
  if (type == "auto" || type == "none") {
    chat["tool_choice"] = type;
  } else if (type == "any") {
    chat["tool_choice"] = "required";
  } else if (type == "tool") {
    LLM_RETURN_IF_ERROR(Required(c, "tool_choice", "name", e));
    chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", c["name"]}}}};
  } else {
    return Bad(e, "tool_choice.type", "'tool_choice.type' must be auto, any, tool or none");
  }
  if (Present(c, "disable_parallel_tool_use")) {
    if (!c["disable_parallel_tool_use"].is_boolean()) {
      return Bad(e, "tool_choice.disable_parallel_tool_use",
                 "'tool_choice.disable_parallel_tool_use' must be true or false");
    }
    chat["parallel_tool_calls"] = !c["disable_parallel_tool_use"].get<bool>();
  }
  return absl::OkStatus();
}

// output_config.format (or the beta's top-level output_format) -> response_format;
// output_config.effort -> the template's reasoning_effort.
absl::Status Output(const json& body, json& chat, ApiError* e) {
  json format;
  std::string at = "output_format";
  if (Present(body, "output_format")) format = body["output_format"];
  if (Present(body, "output_config")) {
    const json& config = body["output_config"];
    if (!config.is_object()) return Bad(e, "output_config", "'output_config' must be an object");
    if (Present(config, "format")) {
      format = config["format"];
      at = "output_config.format";
    }
    if (Present(config, "effort")) chat["reasoning_effort"] = config["effort"];
  }
  if (format.is_null()) return absl::OkStatus();
  if (!format.is_object() || !Is(format["type"], "json_schema") || !format.contains("schema") ||
      !format["schema"].is_object()) {
    return Bad(e, at,
               absl::StrCat("'", at, "' must be {\"type\": \"json_schema\", \"schema\": {...}}"));
  }
  chat["response_format"] = {
      {"type", "json_schema"},
      {"json_schema", {{"name", "output"}, {"schema", format["schema"]}, {"strict", true}}}};
  return absl::OkStatus();
}

// thinking -> the template's enable_thinking (unless chat_template_kwargs sets it), and
// whether the answer shows thinking blocks (*on). Absent, as the API: no thinking.
absl::Status Thinking(const json& body, json& chat, bool* on_out, ApiError* e) {
  const auto set = [&chat, on_out](bool on) {
    json& kwargs = chat["chat_template_kwargs"];
    if (kwargs.is_null()) kwargs = json::object();
    if (kwargs.is_object() && !kwargs.contains("enable_thinking")) kwargs["enable_thinking"] = on;
    *on_out = on;
  };
  if (!Present(body, "thinking")) {
    set(false);
    return absl::OkStatus();
  }
  const json& t = body["thinking"];
  if (!t.is_object() || !t.contains("type")) {
    return Bad(e, "thinking", "'thinking' must be an object with a 'type'");
  }
  const bool on = Is(t["type"], "enabled") || Is(t["type"], "adaptive");
  if (!on && !Is(t["type"], "disabled")) {
    return Bad(e, "thinking.type", "'thinking.type' must be enabled, adaptive or disabled");
  }
  int64_t budget = 0;
  auto got = Int(t, "budget_tokens", 1024, std::numeric_limits<uint32_t>::max(), &budget, e);
  if (!got.ok()) {  // named inside `thinking`
    e->message = absl::StrReplaceAll(e->message, {{"'budget_tokens'", "'thinking.budget_tokens'"}});
    return Bad(e, "thinking.budget_tokens", e->message);
  }
  if (Is(t["type"], "enabled") && !*got) {
    return Bad(e, "thinking.budget_tokens", "'thinking.budget_tokens' is required when enabled");
  }
  set(on);
  return absl::OkStatus();
}

// max_tokens (0: a prompt-cache warm-up, one token computed and not answered), stop_sequences,
// metadata.user_id, and what a server of its own models refuses or ignores.
absl::Status Options(const json& body, bool count_tokens, json& chat, bool* warm, ApiError* e) {
  int64_t v = 0;
  LLM_ASSIGN_OR_RETURN(bool got,
                       Int(body, "max_tokens", 0, std::numeric_limits<uint32_t>::max(), &v, e));
  if (!got && !count_tokens) return Bad(e, "max_tokens", "'max_tokens' is required");
  if (got && !count_tokens) chat["max_completion_tokens"] = std::max<int64_t>(v, 1);
  *warm = got && v == 0;
  if (Present(body, "stop_sequences")) {
    if (!body["stop_sequences"].is_array()) {
      return Bad(e, "stop_sequences", "'stop_sequences' must be an array of strings");
    }
    chat["stop"] = body["stop_sequences"];
  }
  if (Present(body, "metadata")) {
    const json& m = body["metadata"];
    if (!m.is_object()) return Bad(e, "metadata", "'metadata' must be an object");
    if (Present(m, "user_id") && !m["user_id"].is_string()) {
      return Bad(e, "metadata.user_id", "'metadata.user_id' must be a string");
    }
    if (Present(m, "user_id")) chat["user"] = m["user_id"];
  }
  if (Present(body, "container")) {
    return Bad(e, "container", "'container' is not supported: this server runs no code tools");
  }
  if (Present(body, "mcp_servers") &&
      !(body["mcp_servers"].is_array() && body["mcp_servers"].empty())) {
    return Bad(e, "mcp_servers",
               "'mcp_servers' is not supported: call MCP tools from the client, as custom tools");
  }
  for (const char* key : kIgnored) {
    if (Present(body, key)) LogIgnoredOnce(key, "no such control on this server");
  }
  return absl::OkStatus();
}

absl::StatusOr<ParsedRequest> ParseBody(std::string_view text, const ParseOptions& options,
                                        bool count_tokens, ApiError* e) {
  json body = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return Bad(e, "", "the request body is not valid JSON");
  if (!body.is_object()) return Bad(e, "", "the request body must be a JSON object");
  LLM_RETURN_IF_ERROR(CheckFields(body, Known, options, e));
  json chat = json::object();
  for (const char* key : kPassed) {
    if (body.contains(key) && (!count_tokens || std::string_view(key) != "stream")) {
      chat[key] = body[key];
    }
  }
  bool warm = false;
  LLM_RETURN_IF_ERROR(Options(body, count_tokens, chat, &warm, e));
  LLM_RETURN_IF_ERROR(Messages(body, chat, e));
  LLM_RETURN_IF_ERROR(Tools(body, chat, e));
  LLM_RETURN_IF_ERROR(Output(body, chat, e));
  bool thinking = false;
  LLM_RETURN_IF_ERROR(Thinking(body, chat, &thinking, e));
  auto parsed = ParseOpenAiRequest(ApiKind::kChat, chat.dump(), e);
  if (!parsed.ok()) {  // a shared field's error: named as this API names it
    e->message = MessagesErrorText(e->message);
    return parsed.status();
  }
  parsed->kind = ApiKind::kMessages;
  parsed->echo_only = warm;
  parsed->show_reasoning = thinking;
  // As the API: max_tokens beyond what the context leaves ends the answer when the context is
  // full (stop_reason model_context_window_exceeded), rather than refusing the request.
  if (!count_tokens && !warm) parsed->request.set_max_tokens_fit(true);
  // message_start carries the prompt's usage: the first message must have it.
  if (parsed->stream) parsed->request.mutable_stream()->set_continuous_usage(true);
  return parsed;
}

}  // namespace

std::string MessagesErrorText(const std::string& chat_message) {
  return absl::StrReplaceAll(chat_message,
                             {{"'max_completion_tokens'", "'max_tokens'"},
                              {"'stop'", "'stop_sequences'"},
                              {"'stop[", "'stop_sequences["},
                              {"'response_format", "'output_config.format"},
                              {"'reasoning_effort'", "'output_config.effort'"},
                              {"'parallel_tool_calls'", "'tool_choice.disable_parallel_tool_use'"},
                              {".function.parameters", ".input_schema"},
                              {".function.", "."}});
}

absl::StatusOr<ParsedRequest> ParseMessagesRequest(std::string_view text, ApiError* e,
                                                   const ParseOptions& options, bool count_tokens) {
  try {  // the backstop, as ParseOpenAiRequest's
    return ParseBody(text, options, count_tokens, e);
  } catch (const json::exception& x) {
    return Bad(e, "", absl::StrCat("the request body could not be read: ", x.what()));
  }
}

std::string MessagesErrorBody(const ApiError& e) {
  const char* type = "api_error";
  switch (e.http_status) {
    case 400:
      type = "invalid_request_error";
      break;
    case 401:
      type = "authentication_error";
      break;
    case 403:
      type = "permission_error";
      break;
    case 404:
      type = "not_found_error";
      break;
    case 405:
      type = "invalid_request_error";
      break;
    case 413:
      type = "request_too_large";
      break;
    case 429:
      type = "rate_limit_error";
      break;
    case 503:
      type = "overloaded_error";
      break;
    case 504:
      type = "timeout_error";
      break;
    default:
      break;
  }
  return json{{"type", "error"}, {"error", {{"type", type}, {"message", e.message}}}}.dump(
      -1, ' ', false, json::error_handler_t::replace);
}

std::string CountTokensBody(const llm::v1::TokenizeResponse& response) {
  return json{{"input_tokens", response.token_ids_size()}}.dump();
}

}  // namespace llm::router::openai
