// GET /v1/models and /v1/models/{name}: the models a router serves, in OpenAI's shape (with
// vLLM's max_model_len) or, for Anthropic's SDKs (anthropic-version), in Anthropic's (pure
// logic: the relay gathers the models from its workers' load reports).
#ifndef LLM_ROUTER_OPENAI_MODELS_API_H_
#define LLM_ROUTER_OPENAI_MODELS_API_H_

#include <cstdint>
#include <map>
#include <string>

namespace llm::router::openai {

// Each model's name and the longest prompt + output every worker serving it accepts (0: none
// reported).
using ServedModels = std::map<std::string, uint32_t>;

struct ModelsShape {
  bool anthropic = false;
  // When the router started, in Unix seconds: every model's `created` (OpenAI) or `created_at`
  // (Anthropic, RFC 3339). A model has no creation time a client could use; a fixed one keeps
  // the list stable across calls.
  int64_t created = 0;
};

// The list: OpenAI's {"object": "list", "data"}; Anthropic's {"data", "has_more", "first_id",
// "last_id"}.
std::string ModelsListBody(const ServedModels& models, const ModelsShape& shape);

// One model: OpenAI's {"id", "object", "created", "owned_by", "max_model_len"?}; Anthropic's
// {"type", "id", "display_name", "created_at", "lifecycle", "max_input_tokens"?}.
std::string ModelBody(const std::string& name, uint32_t context, const ModelsShape& shape);

}  // namespace llm::router::openai

#endif  // LLM_ROUTER_OPENAI_MODELS_API_H_
