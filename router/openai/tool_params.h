// The OpenAI chat request's tool parameters as llm.v1.Chat fields: `tools` (tools_json),
// `tool_choice` ("none", "auto", "required" or {"type": "function", "function": {"name"}})
// and `parallel_tool_calls`. The worker renders the tools with its chat template and reads
// the calls back (docs/engine.md, "Tool calling"); the legacy `functions` / `function_call`
// are refused, naming what replaces them.
#ifndef LLM_ROUTER_OPENAI_TOOL_PARAMS_H_
#define LLM_ROUTER_OPENAI_TOOL_PARAMS_H_

#include "absl/status/status.h"
#include "llm/v1/generation.pb.h"
#include "nlohmann/json.hpp"
#include "router/openai/openai_api.h"

namespace llm::router::openai {

// Sets chat's tool fields from `body`; a 400 naming the parameter when one is malformed, or
// tool_choice asks for a call the tools cannot give.
absl::Status ParseToolParams(const nlohmann::ordered_json& body, llm::v1::Chat& chat, ApiError* e);

}  // namespace llm::router::openai

#endif  // LLM_ROUTER_OPENAI_TOOL_PARAMS_H_
