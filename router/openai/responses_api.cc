// ParseResponsesRequest (responses_api.h): a /v1/responses body -> the chat request it means.
// The body's own shapes (input items, flat function tools, text.format) are checked and
// translated here, naming their parameters; the translated chat body then goes through the
// chat parser, so sampling, stops and tools are checked by one piece of code.
#include "router/openai/responses_api.h"

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

// Fields passed to the chat parser as they are: the API's own, and the extensions a chat
// request takes (vLLM's Responses API takes them too).
constexpr const char* kPassed[] = {"model",
                                   "temperature",
                                   "top_p",
                                   "parallel_tool_calls",
                                   "stream",
                                   "user",
                                   "seed",
                                   "stop",
                                   "stop_token_ids",
                                   "top_k",
                                   "min_p",
                                   "repetition_penalty",
                                   "ignore_eos",
                                   "presence_penalty",
                                   "frequency_penalty",
                                   "logit_bias",
                                   "speculative",
                                   "chat_template_kwargs",
                                   "skip_special_tokens",
                                   "include_stop_str_in_output",
                                   "prompt_cache_key",
                                   "service_tier",
                                   "safety_identifier"};

// Fields read here (translated, echoed, refused or ignored).
constexpr const char* kRead[] = {"input",
                                 "instructions",
                                 "max_output_tokens",
                                 "tools",
                                 "tool_choice",
                                 "text",
                                 "metadata",
                                 "store",
                                 "include",
                                 "top_logprobs",
                                 "reasoning",
                                 "truncation",
                                 "background",
                                 "stream_options",
                                 "previous_response_id",
                                 "conversation",
                                 "prompt",
                                 "max_tool_calls",
                                 "prompt_cache_retention",
                                 "verbosity",
                                 "prompt_cache_options",
                                 "context_management"};

bool Known(const std::string& key) {
  static const std::set<std::string> known = [] {
    std::set<std::string> k(std::begin(kPassed), std::end(kPassed));
    k.insert(std::begin(kRead), std::end(kRead));
    return k;
  }();
  return known.count(key) > 0;
}

// What a stateless server cannot do, refused by name (nothing is stored to refer to).
absl::Status Stateless(const json& body, ApiError* e) {
  for (const char* key : {"previous_response_id", "conversation", "prompt"}) {
    if (Present(body, key)) {
      return Bad(e, key,
                 absl::StrCat("'", key,
                              "' is not supported: this server stores no responses, "
                              "conversations or prompts; send the whole conversation in 'input'"));
    }
  }
  bool background = false;
  LLM_ASSIGN_OR_RETURN(bool got, Bool(body, "background", &background, e));
  if (got && background) {
    return Bad(e, "background", "'background' is not supported: answer in the call, or stream");
  }
  bool store = false;
  LLM_ASSIGN_OR_RETURN(got, Bool(body, "store", &store, e));
  // Hints with nothing to act on here, logged once: one verbosity (the model's), one cache
  // policy (the prefix cache's), no server-side compaction (an input too long is a 400).
  for (const char* key :
       {"verbosity", "prompt_cache_options", "prompt_cache_retention", "context_management"}) {
    if (Present(body, key)) LogIgnoredOnce(key, "no such control on this server");
  }
  // "auto" would drop the input's first items to fit the context; nothing here is dropped, so
  // an input too long is a 400 either way.
  if (Present(body, "truncation") && !Is(body["truncation"], "disabled") &&
      !Is(body["truncation"], "auto")) {
    return Bad(e, "truncation", "'truncation' must be \"disabled\" or \"auto\"");
  }
  if (Present(body, "max_tool_calls")) {
    return Bad(e, "max_tool_calls",
               "'max_tool_calls' is not supported; 'parallel_tool_calls': false allows one call");
  }
  return absl::OkStatus();
}

// A message's content: a string, or text parts (input_text, output_text, refusal) as chat text
// parts.
absl::StatusOr<json> Content(const json& content, const std::string& at, ApiError* e) {
  if (content.is_string()) return content;
  if (!content.is_array()) {
    return Bad(e, at, absl::StrCat("'", at, "' must be a string or an array of content parts"));
  }
  json parts = json::array();
  for (size_t j = 0; j < content.size(); ++j) {
    const json& part = content[j];
    const std::string p = absl::StrCat(at, "[", j, "]");
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
      return Bad(e, p, absl::StrCat("'", p, "' must be an object with a 'type'"));
    }
    const std::string type = part["type"].get<std::string>();
    const char* key = type == "refusal" ? "refusal" : "text";
    if (type != "input_text" && type != "output_text" && type != "refusal") {
      return Bad(e, p + ".type",
                 absl::StrCat("content part type '", type,
                              "' is not supported (text only: input_text, output_text)"));
    }
    if (!part.contains(key) || !part[key].is_string()) {
      return Bad(e, absl::StrCat(p, ".", key),
                 absl::StrCat("'", p, ".", key, "' must be a string"));
    }
    parts.push_back({{"type", "text"}, {"text", part[key]}});
  }
  return parts;
}

// The string fields `keys` of `item`, checked.
absl::Status Strings(const json& item, const std::string& at,
                     std::initializer_list<const char*> keys, ApiError* e) {
  for (const char* key : keys) {
    if (!item.contains(key) || !item[key].is_string()) {
      return Bad(e, absl::StrCat(at, ".", key),
                 absl::StrCat("'", at, ".", key, "' is required and must be a string"));
    }
  }
  return absl::OkStatus();
}

// A function_call item joins the assistant message before it (the turn that made the call),
// or starts one.
void AddCall(const json& item, json& messages) {
  json call = {{"id", item["call_id"]},
               {"type", "function"},
               {"function", {{"name", item["name"]}, {"arguments", item["arguments"]}}}};
  if (messages.empty() || !Is(messages.back()["role"], "assistant")) {
    messages.push_back({{"role", "assistant"}, {"content", nullptr}});
  }
  json& last = messages.back();
  if (!last.contains("tool_calls")) last["tool_calls"] = json::array();
  last["tool_calls"].push_back(std::move(call));
}

// One input item as chat messages.
absl::Status AddItem(const json& item, const std::string& at, json& messages, ApiError* e) {
  if (!item.is_object()) return Bad(e, at, absl::StrCat("'", at, "' must be an object"));
  std::string type = "message";  // an easy input message has a role and no type
  if (item.contains("type")) {
    if (!item["type"].is_string()) return Bad(e, at + ".type", "'type' must be a string");
    type = item["type"].get<std::string>();
  }
  if (type == "message") {
    LLM_RETURN_IF_ERROR(Strings(item, at, {"role"}, e));
    const std::string role = item["role"].get<std::string>();
    if (role != "user" && role != "system" && role != "developer" && role != "assistant") {
      return Bad(e, at + ".role",
                 absl::StrCat("'", at, ".role' is '", role,
                              "'; it must be user, system, developer or assistant"));
    }
    if (!item.contains("content")) {
      return Bad(e, at + ".content", absl::StrCat("'", at, ".content' is required"));
    }
    LLM_ASSIGN_OR_RETURN(json content, Content(item["content"], at + ".content", e));
    messages.push_back({{"role", role}, {"content", std::move(content)}});
  } else if (type == "function_call") {
    LLM_RETURN_IF_ERROR(Strings(item, at, {"call_id", "name", "arguments"}, e));
    AddCall(item, messages);
  } else if (type == "function_call_output") {
    LLM_RETURN_IF_ERROR(Strings(item, at, {"call_id"}, e));
    if (!item.contains("output")) {
      return Bad(e, at + ".output", absl::StrCat("'", at, ".output' is required"));
    }
    LLM_ASSIGN_OR_RETURN(json output, Content(item["output"], at + ".output", e));
    messages.push_back(
        {{"role", "tool"}, {"tool_call_id", item["call_id"]}, {"content", std::move(output)}});
  } else if (type == "item_reference") {
    return Bad(e, at,
               absl::StrCat("'", at, "' refers to a stored item; this server stores none: send ",
                            "the item itself"));
  } else if (type != "reasoning") {  // a reasoning item is the model's own: nothing to render
    return Bad(e, at + ".type",
               absl::StrCat("input item type '", type,
                            "' is not supported (message, function_call, function_call_output, "
                            "reasoning)"));
  }
  return absl::OkStatus();
}

// instructions (a system message first) and input (a string: one user message; or items).
absl::Status Messages(const json& body, json& chat, ApiError* e) {
  json messages = json::array();
  if (Present(body, "instructions")) {
    if (!body["instructions"].is_string()) {
      return Bad(e, "instructions", "'instructions' must be a string");
    }
    messages.push_back({{"role", "system"}, {"content", body["instructions"]}});
  }
  if (!Present(body, "input")) return Bad(e, "input", "'input' is required");
  const json& input = body["input"];
  if (input.is_string()) {
    messages.push_back({{"role", "user"}, {"content", input}});
  } else if (input.is_array() && !input.empty()) {
    for (size_t i = 0; i < input.size(); ++i) {
      LLM_RETURN_IF_ERROR(AddItem(input[i], absl::StrCat("input[", i, "]"), messages, e));
    }
  } else {
    return Bad(e, "input", "'input' must be a string or a non-empty array of items");
  }
  if (messages.empty() || (messages.size() == 1 && Present(body, "instructions"))) {
    return Bad(e, "input", "'input' holds no message to answer");
  }
  chat["messages"] = std::move(messages);
  return absl::OkStatus();
}

// tools (flat function tools -> chat's {"type": "function", "function": {...}}) and
// tool_choice.
absl::Status Tools(const json& body, json& chat, ApiError* e) {
  if (Present(body, "tools")) {
    const json& tools = body["tools"];
    if (!tools.is_array()) return Bad(e, "tools", "'tools' must be an array");
    json out = json::array();
    for (size_t i = 0; i < tools.size(); ++i) {
      const std::string at = absl::StrCat("tools[", i, "]");
      const json& t = tools[i];
      if (!t.is_object() || !t.contains("type") || !t["type"].is_string()) {
        return Bad(e, at, absl::StrCat("'", at, "' must be an object with a 'type'"));
      }
      if (!Is(t["type"], "function")) {
        return Bad(e, at + ".type",
                   absl::StrCat("tool type '", t["type"].get<std::string>(),
                                "' is not supported (function only)"));
      }
      LLM_RETURN_IF_ERROR(Strings(t, at, {"name"}, e));
      json function = json::object();
      for (const char* key : {"name", "description", "parameters", "strict"}) {
        if (t.contains(key)) function[key] = t[key];
      }
      out.push_back({{"type", "function"}, {"function", std::move(function)}});
    }
    chat["tools"] = std::move(out);
  }
  if (!Present(body, "tool_choice")) return absl::OkStatus();
  const json& c = body["tool_choice"];
  if (c.is_string()) {
    chat["tool_choice"] = c;
  } else if (c.is_object() && c.contains("type") && Is(c["type"], "function") &&
             c.contains("name") && c["name"].is_string()) {
    chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", c["name"]}}}};
  } else {
    return Bad(e, "tool_choice",
               "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": "
               "\"function\", \"name\": ...}");
  }
  return absl::OkStatus();
}

// text.format -> chat's response_format.
absl::Status Format(const json& body, json& chat, ApiError* e) {
  if (!Present(body, "text")) return absl::OkStatus();
  const json& text = body["text"];
  if (!text.is_object()) return Bad(e, "text", "'text' must be an object");
  if (!Present(text, "format")) return absl::OkStatus();
  const json& f = text["format"];
  if (!f.is_object() || !f.contains("type")) {
    return Bad(e, "text.format", "'text.format' must be an object with a 'type'");
  }
  if (Is(f["type"], "text")) return absl::OkStatus();
  if (Is(f["type"], "json_object")) {
    chat["response_format"] = {{"type", "json_object"}};
    return absl::OkStatus();
  }
  if (!Is(f["type"], "json_schema")) {
    return Bad(e, "text.format.type",
               "'text.format.type' must be text, json_object or json_schema");
  }
  if (!Present(f, "schema")) {
    return Bad(e, "text.format.schema", "'text.format.schema' is required with json_schema");
  }
  json schema = {{"name", f.contains("name") ? f["name"] : json("response")},
                 {"schema", f["schema"]}};
  if (f.contains("strict")) schema["strict"] = f["strict"];
  chat["response_format"] = {{"type", "json_schema"}, {"json_schema", std::move(schema)}};
  return absl::OkStatus();
}

// max_output_tokens, logprobs (include's "message.output_text.logprobs", top_logprobs) and
// reasoning.effort (the template's reasoning_effort, as chat's).
absl::Status Options(const json& body, json& chat, ApiError* e) {
  int64_t v = 0;
  LLM_ASSIGN_OR_RETURN(
      bool got, Int(body, "max_output_tokens", 1, std::numeric_limits<uint32_t>::max(), &v, e));
  if (got) chat["max_completion_tokens"] = v;
  bool logprobs = false;
  if (Present(body, "include")) {
    if (!body["include"].is_array()) return Bad(e, "include", "'include' must be an array");
    for (const json& x : body["include"]) {
      if (!x.is_string()) return Bad(e, "include", "'include' must hold strings");
      // The rest name outputs of tools or reasoning this server never produces.
      logprobs = logprobs || Is(x, "message.output_text.logprobs");
    }
  }
  LLM_ASSIGN_OR_RETURN(got, Int(body, "top_logprobs", 0, 20, &v, e));
  if (logprobs || (got && v > 0)) {
    chat["logprobs"] = true;
    chat["top_logprobs"] = got ? v : 0;
  }
  if (Present(body, "reasoning")) {
    const json& r = body["reasoning"];
    if (!r.is_object()) return Bad(e, "reasoning", "'reasoning' must be an object");
    if (Present(r, "effort")) chat["reasoning_effort"] = r["effort"];
  }
  if (Present(body, "stream_options") && !body["stream_options"].is_object()) {
    return Bad(e, "stream_options", "'stream_options' must be an object");
  }
  if (!Present(body, "metadata")) return absl::OkStatus();
  const json& m = body["metadata"];
  if (!m.is_object()) return Bad(e, "metadata", "'metadata' must be an object");
  for (const auto& [key, value] : m.items()) {
    if (!value.is_string()) {
      return Bad(e, "metadata", absl::StrCat("'metadata.", key, "' must be a string"));
    }
  }
  return absl::OkStatus();
}

// The request's parameters as its Response repeats them, defaults filled in.
json Echo(const json& body) {
  const auto get = [&body](const char* key, json fallback) {
    return Present(body, key) ? body[key] : fallback;
  };
  json format = {{"type", "text"}};
  if (Present(body, "text") && Present(body["text"], "format")) format = body["text"]["format"];
  json reasoning = {{"effort", nullptr}, {"summary", nullptr}};
  if (Present(body, "reasoning")) {
    for (const auto& [key, value] : body["reasoning"].items()) reasoning[key] = value;
  }
  return {{"instructions", get("instructions", nullptr)},
          {"max_output_tokens", get("max_output_tokens", nullptr)},
          {"metadata", get("metadata", json::object())},
          {"parallel_tool_calls", get("parallel_tool_calls", true)},
          {"reasoning", std::move(reasoning)},
          {"temperature", get("temperature", 1.0)},
          {"text", {{"format", std::move(format)}}},
          {"tool_choice", get("tool_choice", "auto")},
          {"tools", get("tools", json::array())},
          {"top_logprobs", get("top_logprobs", 0)},
          {"top_p", get("top_p", 1.0)},
          {"truncation", get("truncation", "disabled")},
          {"user", get("user", nullptr)}};
}

absl::StatusOr<ParsedRequest> ParseBody(std::string_view text, const ParseOptions& options,
                                        ApiError* e) {
  json body = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return Bad(e, "", "the request body is not valid JSON");
  if (!body.is_object()) return Bad(e, "", "the request body must be a JSON object");
  LLM_RETURN_IF_ERROR(CheckFields(body, Known, options, e));
  LLM_RETURN_IF_ERROR(Stateless(body, e));
  json chat = json::object();
  for (const char* key : kPassed) {
    if (body.contains(key)) chat[key] = body[key];
  }
  LLM_RETURN_IF_ERROR(Messages(body, chat, e));
  LLM_RETURN_IF_ERROR(Tools(body, chat, e));
  LLM_RETURN_IF_ERROR(Format(body, chat, e));
  LLM_RETURN_IF_ERROR(Options(body, chat, e));
  auto parsed = ParseOpenAiRequest(ApiKind::kChat, chat.dump(), e);
  if (!parsed.ok()) {  // a shared field's error: named as this API names it
    e->param = ResponsesParam(e->param);
    e->message =
        absl::StrReplaceAll(e->message, {{"'messages", "'input"},
                                         {"'max_completion_tokens'", "'max_output_tokens'"},
                                         {"'response_format", "'text.format"},
                                         {"'reasoning_effort'", "'reasoning.effort'"}});
    return parsed.status();
  }
  parsed->kind = ApiKind::kResponses;
  parsed->response_params = Echo(body);
  return parsed;
}

}  // namespace

std::string ResponsesParam(const std::string& chat_param) {
  // A chat message's index is not its input item's (instructions lead, function calls join
  // the message before them, reasoning items are skipped): the parameter alone.
  if (chat_param.rfind("messages", 0) == 0) return "input";
  for (const auto& [from, to] :
       {std::pair<std::string_view, std::string_view>{"max_completion_tokens", "max_output_tokens"},
        {"max_tokens", "max_output_tokens"},
        {"response_format", "text.format"},
        {"reasoning_effort", "reasoning.effort"}}) {
    if (chat_param.rfind(from, 0) == 0) {
      return std::string(to) + chat_param.substr(from.size());
    }
  }
  return chat_param;
}

absl::StatusOr<ParsedRequest> ParseResponsesRequest(std::string_view text, ApiError* e,
                                                    const ParseOptions& options) {
  try {  // the backstop, as ParseOpenAiRequest's
    return ParseBody(text, options, e);
  } catch (const json::exception& x) {
    return Bad(e, "", absl::StrCat("the request body could not be read: ", x.what()));
  }
}

}  // namespace llm::router::openai
