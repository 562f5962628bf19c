// The OpenAI request's structured-output parameters as the worker's llm.v1.Constraint:
// response_format (json_object, json_schema), vLLM's structured_outputs (json, regex, choice,
// grammar, json_object) and its older guided_json / guided_regex / guided_choice /
// guided_grammar. At most one of them.
#ifndef LLM_ROUTER_OPENAI_STRUCTURED_PARAMS_H_
#define LLM_ROUTER_OPENAI_STRUCTURED_PARAMS_H_

#include "absl/status/status.h"
#include "llm/v1/generation.pb.h"
#include "nlohmann/json.hpp"
#include "router/openai/openai_api.h"

namespace llm::router::openai {

// Sets r.constraint from `body`; a 400 naming the parameter when one is malformed or two
// constrain the output. A schema is passed on as its JSON text, its keys in the body's order.
absl::Status ParseConstraint(const nlohmann::ordered_json& body, llm::v1::GenerateRequest& r,
                             ApiError* e);

}  // namespace llm::router::openai

#endif  // LLM_ROUTER_OPENAI_STRUCTURED_PARAMS_H_
