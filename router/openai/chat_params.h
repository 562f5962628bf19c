// The chat form of a request body as llm.v1.Chat: `messages` (roles system, developer (=
// system), user, assistant, tool; content a string, null or text parts; name, tool_call_id,
// tool_calls, reasoning_content: the thinking an answer carried, sent back), the tool parameters
// (tool_params.h), `add_generation_prompt`, `continue_final_message` (vLLM's: the answer continues
// the last, assistant's, message) and `chat_template_kwargs`. Shared by /v1/chat/completions and
// the chat form of /tokenize.
#ifndef LLM_ROUTER_OPENAI_CHAT_PARAMS_H_
#define LLM_ROUTER_OPENAI_CHAT_PARAMS_H_

#include "absl/status/status.h"
#include "llm/v1/generation.pb.h"
#include "nlohmann/json.hpp"
#include "router/openai/openai_api.h"

namespace llm::router::openai {

// Sets `chat` from `body`'s chat fields; a 400 naming the first malformed one.
absl::Status ParseChat(const nlohmann::ordered_json& body, llm::v1::Chat& chat, ApiError* e);

}  // namespace llm::router::openai

#endif  // LLM_ROUTER_OPENAI_CHAT_PARAMS_H_
