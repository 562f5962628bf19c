#include "router/openai/chat_params.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "router/openai/body_fields.h"
#include "router/openai/tool_params.h"

namespace llm::router::openai {
namespace {

using json = nlohmann::ordered_json;

// `text` of a message's content: a string, null, or an array of {"type": "text", "text"} parts
// (joined with newlines).
absl::StatusOr<std::string> ContentText(const json& content, const std::string& param,
                                        ApiError* e) {
  if (content.is_null()) return std::string();
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) {
    return Bad(e, param, absl::StrCat("'", param, "' must be a string or an array of parts"));
  }
  std::string text;
  for (size_t j = 0; j < content.size(); ++j) {
    const json& part = content[j];
    const std::string p = absl::StrCat(param, "[", j, "]");
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
      return Bad(e, p, absl::StrCat("'", p, "' must be an object with a 'type'"));
    }
    if (part["type"] != "text") {
      return Bad(e, p + ".type",
                 absl::StrCat("content part type '", part["type"].get<std::string>(),
                              "' is not supported (text only)"));
    }
    if (!part.contains("text") || !part["text"].is_string()) {
      return Bad(e, p + ".text", absl::StrCat("'", p, ".text' must be a string"));
    }
    if (!text.empty()) text += "\n";
    text += part["text"].get<std::string>();
  }
  return text;
}

absl::Status ParseMessages(const json& body, llm::v1::Chat* chat, ApiError* e) {
  if (!Present(body, "messages")) return Bad(e, "messages", "'messages' is required");
  const json& messages = body["messages"];
  if (!messages.is_array() || messages.empty()) {
    return Bad(e, "messages", "'messages' must be a non-empty array");
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    const std::string p = absl::StrCat("messages[", i, "]");
    if (!m.is_object()) return Bad(e, p, absl::StrCat("'", p, "' must be an object"));
    if (!m.contains("role") || !m["role"].is_string()) {
      return Bad(e, p + ".role", absl::StrCat("'", p, ".role' must be a string"));
    }
    std::string role = m["role"].get<std::string>();
    if (role == "developer") role = "system";  // OpenAI's newer name for the system role
    if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
      return Bad(e, p + ".role",
                 absl::StrCat("'", p, ".role' is '", role,
                              "'; it must be system, developer, user, assistant or tool"));
    }
    auto* out = chat->add_messages();
    out->set_role(role);
    if (m.contains("content")) {
      auto text = ContentText(m["content"], p + ".content", e);
      if (!text.ok()) return text.status();
      out->set_content(*std::move(text));
    } else if (role != "assistant") {
      return Bad(e, p + ".content", absl::StrCat("'", p, ".content' is required"));
    }
    for (const char* key : {"name", "tool_call_id", "reasoning_content"}) {
      if (!Present(m, key)) continue;
      if (!m[key].is_string()) {
        return Bad(e, absl::StrCat(p, ".", key),
                   absl::StrCat("'", p, ".", key, "' must be a string"));
      }
      if (std::string_view(key) == "name") {
        out->set_name(m[key].get<std::string>());
      } else if (std::string_view(key) == "reasoning_content") {
        out->set_reasoning_content(m[key].get<std::string>());
      } else {
        out->set_tool_call_id(m[key].get<std::string>());
      }
    }
    if (Present(m, "tool_calls")) {
      if (!m["tool_calls"].is_array()) {
        return Bad(e, p + ".tool_calls", absl::StrCat("'", p, ".tool_calls' must be an array"));
      }
      out->set_tool_calls_json(m["tool_calls"].dump());
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseChat(const json& body, llm::v1::Chat& chat, ApiError* e) {
  if (auto s = ParseMessages(body, &chat, e); !s.ok()) return s;
  if (auto s = ParseToolParams(body, chat, e); !s.ok()) return s;
  bool add = true;
  LLM_ASSIGN_OR_RETURN(const bool got, Bool(body, "add_generation_prompt", &add, e));
  if (got) chat.set_add_generation_prompt(add);
  bool continue_final = false;
  LLM_ASSIGN_OR_RETURN(const bool got_continue,
                       Bool(body, "continue_final_message", &continue_final, e));
  if (got_continue && continue_final) {
    if (got && add) {
      return Bad(e, "continue_final_message",
                 "'continue_final_message' and 'add_generation_prompt' cannot both be true");
    }
    if (chat.messages(chat.messages_size() - 1).role() != "assistant") {
      return Bad(e, "continue_final_message",
                 "'continue_final_message' needs the last message to be the assistant's");
    }
    chat.set_continue_final_message(true);
    chat.set_add_generation_prompt(false);
  }
  if (Present(body, "chat_template_kwargs")) {
    if (!body["chat_template_kwargs"].is_object()) {
      return Bad(e, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
    }
    chat.set_template_kwargs_json(body["chat_template_kwargs"].dump());
  }
  return absl::OkStatus();
}

}  // namespace llm::router::openai
